"""The extension module's initialisation (PEP 489, multi-phase): a
re-import in the same interpreter gets the same classes and types; an
import in a sub-interpreter fails cleanly, with an ImportError saying why
(its types and exception classes are the main interpreter's)."""
import importlib
import sys

import pytest

import wds


def test_reimport_after_removal_keeps_the_classes():
    first = sys.modules["wds._wds"]
    del sys.modules["wds._wds"]
    try:
        again = importlib.import_module("wds._wds")
        assert again is not first  # a new module object, executed again
        for name in ("Error", "SpecError", "OpenError", "NotFoundError",
                     "Reader", "Index", "_Loader", "_Writer", "BytesField"):
            assert getattr(again, name) is getattr(first, name), name
        assert again.__version__ == first.__version__
        # Raised by either module object, caught by the package's class.
        with pytest.raises(wds.SpecError, match="brace"):
            again.expand("a-{1..")
    finally:
        sys.modules["wds._wds"] = first


def subinterpreters():
    for name in ("_xxsubinterpreters", "_interpreters"):
        try:
            return importlib.import_module(name)
        except ImportError:
            pass
    return None


def test_import_in_a_subinterpreter_fails_cleanly():
    si = subinterpreters()
    if si is None:
        pytest.skip(f"Python {sys.version.split()[0]} has no sub-interpreter "
                    "module (_xxsubinterpreters or _interpreters)")
    interp = si.create()
    try:
        code = ("import sys\n"
                f"sys.path[:0] = {sys.path!r}\n"
                "try:\n"
                "    import wds._wds\n"
                "except ImportError as e:\n"
                "    assert 'sub-interpreter' in str(e), e\n"
                "else:\n"
                "    raise AssertionError('wds._wds imported in a sub-interpreter')\n")
        si.run_string(interp, code)
    finally:
        si.destroy(interp)
    # The main interpreter's module is unharmed.
    with pytest.raises(wds.SpecError):
        wds.expand("a-{1..")
