"""wds.Reader and wds.Index: the extension's types (_reader.c, _index.c)
with a __repr__ that says what they read."""

from . import _wds


def _shards_text(urls):
    if not urls:
        return "no shards"
    if len(urls) == 1:
        return repr(urls[0])
    return f"{len(urls)} shards {urls[0]!r} .. {urls[-1]!r}"


class Reader(_wds.Reader):
    __slots__ = ()
    __doc__ = _wds.Reader.__doc__

    def __repr__(self):
        if self.closed:
            return "<wds.Reader closed>"
        return f"<wds.Reader {_shards_text(self.shards)}>"


class Index(_wds.Index):
    __slots__ = ()
    __doc__ = _wds.Index.__doc__

    def __repr__(self):
        urls = self.urls
        sizes = self.sizes
        return (f"<wds.Index {_shards_text(urls)}, {sum(sizes)} samples>")
