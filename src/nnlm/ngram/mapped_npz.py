"""The arrays of a saved model's arrays.npz mapped from the file instead of copied out of it: a model's
load is part of `nnlm score`'s time to a first score (issue 48), and np.load copies every array twice
(out of the zip member, into the array), ~0.3-1 s for Brown KN5's 58 MB on a busy machine.

`save_aligned_npz` writes the file np.load reads, with every array's bytes at a 64-byte boundary of
the file (np.savez puts them wherever the zip headers end): an array mapped at an odd address is
"unaligned" to numpy and numba, which then take slow paths (np.searchsorted on Brown KN5's 4-gram keys:
480 us a call against 7 us on an aligned copy, 65 x). A file written before (or by np.savez) is still
read; its misaligned arrays are copied at the load.

np.savez stores each array as an uncompressed zip member holding a .npy file, so the array's bytes lie
in the file as they are: this reads the zip directory (zipfile), each member's .npy header
(numpy.lib.format), checks each member's CRC-32 as zipfile would (a damaged file is refused, not read
as numbers), and makes each array over a private copy-on-write mapping of the file (the arrays are
writable; nothing is ever written back; a model saved over this one is a new file, by rename, and
leaves the mapping as it was). Anything else (a compressed member, an object array) returns None and
the caller reads the file with np.load.
"""
from __future__ import annotations

import io
import mmap
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, (version .. sizes), name length, extra length
HEADER_BYTES = 1 << 16  # a .npy header np.savez writes is far smaller
ALIGN = 64  # where each member's .npy starts (its header pads the array's bytes to 64 again: numpy's rule)
PAD_FIELD = 0xA11C  # the id of the zip extra field that pads a local header (readers skip fields they don't know)
ZIP64_FIELD_BYTES = 20  # the zip64 extra field zipfile writes in a local header when force_zip64 is set


def save_aligned_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` as np.savez does (stored .npy members; np.load reads the file), each member's bytes
    starting at a multiple of ALIGN in the file: a padding extra field in its local header."""
    with open(path, "wb") as fh, zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_STORED,
                                                  allowZip64=True) as archive:
        for name, value in arrays.items():
            array = np.asanyarray(value)
            member = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_STORED
            header_end = fh.tell() + LOCAL_HEADER.size + len(member.filename.encode()) + ZIP64_FIELD_BYTES + 4
            member.extra = struct.pack("<HH", PAD_FIELD, -header_end % ALIGN) + bytes(-header_end % ALIGN)
            with archive.open(member, mode="w", force_zip64=True) as out:
                if fh.tell() % ALIGN:
                    raise AssertionError(f"{name}: zip member data at {fh.tell()}, not aligned")
                npy.write_array(out, array, allow_pickle=False)


def mapped_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """{name: array} of the .npz at `path`, each over the file's mapping; None where np.load must read it.
    Raises zipfile.BadZipFile (or ValueError) for a damaged file."""
    with open(path, "rb") as fh:
        with zipfile.ZipFile(fh) as archive:
            members = archive.infolist()
        if not members or any(m.compress_type != zipfile.ZIP_STORED or not m.filename.endswith(".npy")
                               for m in members):
            return None
        buffer = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    view = memoryview(buffer)
    arrays = {}
    for member in members:
        at = member.header_offset
        signature, name_length, extra_length = LOCAL_HEADER.unpack_from(view, at)
        if signature != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {member.filename}")
        start = at + LOCAL_HEADER.size + name_length + extra_length
        data = view[start:start + member.file_size]
        if len(data) != member.file_size or zlib.crc32(data) != member.CRC:
            raise zipfile.BadZipFile(f"bad CRC-32 for {member.filename}")
        header = io.BytesIO(data[:HEADER_BYTES])
        version = npy.read_magic(header)
        shape, fortran, dtype = (npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0)(header)
        if dtype.hasobject:
            return None
        count = int(np.prod(shape, dtype=np.int64))
        if header.tell() + count * dtype.itemsize != member.file_size:
            raise ValueError(f"{member.filename}: its header does not match its size")
        array = np.frombuffer(buffer, dtype=dtype, count=count, offset=start + header.tell())
        if (start + header.tell()) % max(dtype.alignment, 1):
            array = array.copy()  # a file of np.savez: an unaligned array is slow to search (see above)
        arrays[member.filename[:-4]] = array.reshape(shape, order="F" if fortran else "C")
    return arrays
