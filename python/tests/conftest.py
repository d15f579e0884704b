"""pytest configuration of the wds package's tests."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA GPU (skipped, visibly, without one)")
