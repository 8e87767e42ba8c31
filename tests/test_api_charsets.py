"""The openai backend and the serper client read a JSON answer whatever charset label it carries (a real server on
127.0.0.1): JSON is UTF-8, and a label Python does not know, or one naming a bytes codec, raised a LookupError
traceback from ``bytes.decode``."""

from __future__ import annotations

import json

import pytest

from berds.corpora.search import SerperProvider
from berds.llm.base import user_prompt
from berds.llm.openai_backend import OpenAILLM
from http_fixtures import PageHandler, serving

pytestmark = pytest.mark.network


class Labelled(PageHandler):
    def do_POST(self):  # noqa: N802 - a chat completion and a search answer in one UTF-8 body, under /CHARSET/...
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = {"choices": [{"message": {"content": "Oui, d\u00e9j\u00e0"}}],
                "organic": [{"link": "http://example.com/caf\u00e9", "title": "Caf\u00e9"}]}
        self._send(200, json.dumps(body, ensure_ascii=False).encode("utf-8"),
                   f"application/json; charset={self.path.split('/')[1]}")


@pytest.fixture(scope="module")
def server():
    with serving(Labelled) as srv:
        yield f"http://127.0.0.1:{srv.server_port}"


@pytest.mark.parametrize("charset", ["no-such-charset", "zlib", "rot13", "base64", "utf-8"])
def test_a_json_answer_is_read_whatever_its_charset_label(server, charset):
    llm = OpenAILLM("m", base_url=f"{server}/{charset}/v1", max_retries=0)
    assert llm.generate([user_prompt("q")])[0].text == "Oui, d\u00e9j\u00e0"
    hits = SerperProvider(api_key="k", base_url=f"{server}/{charset}", retries=0).search("q", num=1)
    assert [(h.url, h.title) for h in hits] == [("http://example.com/caf\u00e9", "Caf\u00e9")]
