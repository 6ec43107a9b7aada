"""benchmarks/real_text_corpus.py: the text taken from HTML, dictionary and WordNet lines, its tokens, the prose
filter, the proportional interleaving and the byte-identical gzip output (inline inputs, no apt packages)."""
from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("real_text_corpus",
                                              Path(__file__).parent.parent / "benchmarks" / "real_text_corpus.py")
rtc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rtc)

PAGE = """<html><head><title>T</title><style>p {color: red}</style><script>var x = 1;</script></head>
<body><div class="sphinxsidebar"><p>Sidebar text that is not content.</p></div>
<div class="body" role="main"><h1>Locks<a class="headerlink" href="#l">\u00b6</a></h1>
<p>A lock is taken with <code class="docutils literal"><span class="pre">spin_lock()</span></code> and
   released later.<br>Then the next line.</p>
<div class="highlight-c notranslate"><div class="highlight"><pre>spin_lock(&amp;l);</pre></div></div>
<pre>plain listing</pre>
<dl class="c function"><dt class="sig sig-object c">void <span>f</span>(int x)</dt><dd><p>Does it.</p></dd></dl>
<table><tr><td>cell</td></tr></table>
<ul><li>first item<li>second item</ul>
</div><footer>Copyright text</footer></body></html>"""


def test_html_keeps_the_main_prose_and_drops_code_blocks_tables_and_furniture():
    assert rtc.html_paragraphs(PAGE) == ["Locks", "A lock is taken with spin_lock() and released later.",
                                         "Then the next line.", "Does it.", "first item", "second item"]


def test_a_page_without_a_main_part_is_read_whole():
    assert rtc.html_paragraphs("<p>One &amp; two.</p><pre>x</pre><p>Three</p>") == ["One & two.", "Three"]


def test_tokens_split_punctuation_from_words_as_brown_does():
    text = "\u201cDon\u2019t\u201d use os.path\u2014e.g. 3.5 and/or (well-known) -- ok..."
    assert rtc.tokenize(text) == ['"', "Don't", '"', "use", "os.path", "\u2014", "e.g", ".", "3.5", "and/or",
                                  "(", "well-known", ")", "--", "ok", "..."]


def test_short_lines_and_lines_of_mostly_symbols_are_not_prose():
    assert rtc.is_prose(rtc.tokenize("The lock is held here."))
    assert not rtc.is_prose(rtc.tokenize("Held here."))
    assert not rtc.is_prose(rtc.tokenize("0x10 | 0x20 | 0x30 | 0x40"))


GCIDE = """00-database-short
   The dictionary itself

Abaca \\Ab"a*ca\\ ([a^]b"[.a]*k[.a]), n. [The native name.]
   The Manila-hemp plant ({Musa textilis}); also, its fiber. See
   {Ab"a*ca*ly} under {Manila}.
   [1913 Webster]

Cafe \\Caf*e\\, n.
   A caf['e] or coffee house; an [ae]rial view.
   [1913 Webster]

   2. A second sense.
   [PJC]
"""


def test_gcide_entries_lose_headwords_pronunciations_and_markup():
    entries = list(rtc.gcide_entries(GCIDE))
    assert [h for h, _ in entries] == ["00-database-short", "Abaca", "Cafe"]
    assert [" ".join(p.split()) for p in entries[1][1]] == [
        "n. [The native name.] The Manila-hemp plant (Musa textilis); also, its fiber. See Abacaly under Manila."]
    assert [" ".join(p.split()) for p in entries[2][1]] == ["n. A cafe or coffee house; an aerial view.",
                                                            "2. A second sense."]


def test_a_wordnet_line_gives_its_definition_and_examples():
    line = ('00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived to exist; '
            '"the entity was whole"; "a second one"  ')
    assert rtc.wordnet_gloss(line) == ["that which is perceived to exist", "the entity was whole", "a second one"]
    assert rtc.wordnet_gloss("  1 This software and database is being provided") == []


def test_sources_are_spread_in_proportion_and_duplicates_dropped():
    big = [(f"d{i}", [["w"] * 3]) for i in range(6)]  # 6 documents of 3 tokens
    small = [("s0", [["x"] * 3]), ("s1", [["x"] * 3])]  # 2 documents of 3 tokens
    order = [name for name, _ in rtc.interleave({"big": big, "small": small})]
    assert order == ["big", "big", "small", "big", "big", "big", "small", "big"]  # keys 1,3,3,5,7,9,9,11 / 12
    lines = list(rtc.unique_lines(rtc.interleave({"big": big, "small": small})))
    assert lines == [("big", "w w w"), ("small", "x x x")]


def test_the_gzip_output_is_the_same_bytes_every_time(tmp_path):
    a, b = tmp_path / "a.txt.gz", tmp_path / "b.txt.gz"
    rtc.write_corpus(a, ["one line", "two"])
    rtc.write_corpus(b, ["one line", "two"])
    assert a.read_bytes() == b.read_bytes()
    assert gzip.decompress(a.read_bytes()) == b"one line\ntwo\n"


def test_missing_packages_are_one_line_naming_the_apt_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(rtc.SOURCES, "gcide", ("dict-gcide", tmp_path / "absent.dz"))
    assert rtc.main([str(tmp_path / "out.txt"), "--sources", "gcide"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dict-gcide" in err and rtc.APT_COMMAND in err
    assert not (tmp_path / "out.txt").exists()
