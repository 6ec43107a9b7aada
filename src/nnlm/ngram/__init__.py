"""Count-based n-gram language models."""
