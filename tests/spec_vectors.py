"""Where the format spec's byte-exact test vectors are: `tests/vectors/`.

That folder is a copy of the spec's vector folder (its README says what each
file holds), so the tests need nothing outside the repository. Test modules
import `VECTORS_DIR` from here: the root conftest puts `tests/` on sys.path.
"""
from pathlib import Path

VECTORS_DIR = Path(__file__).resolve().parent / "vectors"
