"""A small compressed answer that inflates to hundreds of MB is cut at the size limit without being inflated
(real servers on 127.0.0.1): the page fetcher, the serper client and the openai backend read through
``berds.io.read_streamed_body``, which relies on urllib3 >= 2.6 decoding at most what each read asks for."""

from __future__ import annotations

import tracemalloc
import zlib

import pytest

from berds.corpora.search import FetchOptions, PageFetcher, SearchCache, SearchError, SerperProvider
from berds.errors import BerdsError
from berds.llm.base import user_prompt
from berds.llm.openai_backend import OpenAILLM
from http_fixtures import PageHandler, serving

pytestmark = pytest.mark.network

INFLATED = 256 << 20


def gzip_layers(layers: int) -> bytes:
    """``INFLATED`` zero bytes gzipped ``layers`` times (built a MB at a time: the test never holds them)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = b"".join(packer.compress(bytes(1 << 20)) for _ in range(INFLATED >> 20)) + packer.flush()
    for _ in range(layers - 1):
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        data = packer.compress(data) + packer.flush()
    return data


class Bomb(PageHandler):
    def _bomb(self, content_type: str):
        layers = int(self.path.strip("/").split("/")[0])
        body = gzip_layers(layers)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Encoding", ", ".join(["gzip"] * layers))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):  # noqa: N802
        self._bomb("text/html")

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._bomb("application/json")


@pytest.fixture(scope="module")
def bomb():
    with serving(Bomb) as srv:
        yield f"http://127.0.0.1:{srv.server_port}"


def peak_mb(call) -> float:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("layers", [1, 2])
def test_a_page_that_inflates_to_256_mb_is_refused_as_too_large(bomb, tmp_path, layers):
    fetcher = PageFetcher(SearchCache(tmp_path), FetchOptions(retries=0, total_timeout=60, max_bytes=1_000_000))
    records = []
    peak = peak_mb(lambda: records.append(fetcher.fetch(f"{bomb}/{layers}/page")))
    assert not records[0].ok and records[0].reason == "too large (> 1,000,000 bytes)"
    assert peak < 64, peak  # (urllib3 2.5 inflated the 590-byte two-layer body whole: 256 MB)


@pytest.mark.parametrize("layers", [1, 2])
def test_the_serper_client_and_the_openai_backend_cut_an_inflating_answer(bomb, layers):
    serper = SerperProvider(api_key="k", base_url=f"{bomb}/{layers}", retries=0, max_response_bytes=1_000_000)
    llm = OpenAILLM("m", base_url=f"{bomb}/{layers}/v1", max_retries=0, max_response_bytes=1_000_000)
    for call, error, message in [(lambda: serper.search("q", num=3), SearchError, "answered more than 1,000,000 bytes"),
                                 (lambda: llm.generate([user_prompt("q")]), BerdsError,
                                  "the answer is over 1,000,000 bytes")]:
        def refused(call=call, error=error, message=message):
            with pytest.raises(error, match=message):
                call()

        peak = peak_mb(refused)
        assert peak < 64, (message, peak)
