"""Web snapshots: jsonl field detection (CCNet, Sphere, explicit), HTML records, WARC archives, CLI."""

from __future__ import annotations

import io
import json

import pytest

from berds.corpora.build import BuildReport
from berds.corpora.web import JsonlFields, build_web, iter_jsonl_documents, iter_warc_documents
from berds.errors import InputError
from berds.types import Passage


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def page_html(title: str, body: str) -> str:
    return (f"<html><head><title>{title}</title></head><body><div class='menu'>Home News Login</div>"
            f"<article><p>{body}</p></article></body></html>")


def test_ccnet_records_are_detected_by_raw_content(tmp_path):
    path = write_jsonl(tmp_path / "ccnet.jsonl", [
        {"url": "http://a.example/1", "raw_content": " ".join(f"a{i}" for i in range(150)), "title": "A", "digest": "sha1:X"},
        {"url": "http://a.example/2", "raw_content": "   ", "title": "Empty"},
    ])
    report = BuildReport("t", "t")
    docs = list(iter_jsonl_documents([path], report))
    assert len(docs) == 1 and docs[0].source == "http://a.example/1" and docs[0].id == "ccnet:1"  # no id field: file:line
    assert report.skipped == {"empty text": 1}
    assert report.extra["jsonl_fields"][str(path)] == {"text": "raw_content", "title": "title", "url": "url", "id": ""}


def test_sphere_records_kept_as_passages(tmp_path):
    path = write_jsonl(tmp_path / "sphere.jsonl", [
        {"id": "sph-1", "contents": "first passage text", "title": "T1", "url": "http://s/1"},
        {"id": "sph-2", "contents": "second passage", "title": "T2", "url": "http://s/2"},
    ])
    store, report = build_web(tmp_path / "store", jsonl=[path], as_passages=True, progress=False)
    assert list(store) == [Passage("sph-1", "first passage text", "T1", "http://s/1"),
                           Passage("sph-2", "second passage", "T2", "http://s/2")]
    assert report.documents_read == 2 and report.passages_written == 2


def test_explicit_fields_win_and_documents_are_split(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"docno": 7, "body_text": " ".join(f"w{i}" for i in range(230)), "text": "decoy",
                                               "headline": "Head"}])
    store, _ = build_web(tmp_path / "s", jsonl=[path], fields=JsonlFields(text="body_text", id="docno", title="headline"),
                         progress=False)
    assert list(store.ids()) == ["7-0", "7-1", "7-2"]
    assert store.get("7-2").text == " ".join(f"w{i}" for i in range(200, 230)) and store.get("7-0").title == "Head"


def test_field_errors_name_the_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "odd.jsonl", [{"body": "x"}, {"identifier": "1", "words": "y"}])
    with pytest.raises(InputError, match=r"odd.jsonl, line 2: missing field 'body'"):
        list(iter_jsonl_documents([path]))
    path = write_jsonl(tmp_path / "none.jsonl", [{"identifier": "1", "words": "y"}])
    with pytest.raises(InputError, match=r"none.jsonl, line 1: no text field found; the record has \['identifier', 'words'\].*--text-field"):
        list(iter_jsonl_documents([path]))
    with pytest.raises(InputError, match=r"the text field 'txt' is not in the record"):
        list(iter_jsonl_documents([path], fields=JsonlFields(text="txt")))
    path = write_jsonl(tmp_path / "typed.jsonl", [{"text": ["a", "list"]}])
    with pytest.raises(InputError, match=r"typed.jsonl, line 1: field 'text' must be a string, got list"):
        list(iter_jsonl_documents([path]))


def test_html_records_use_the_shared_cleaner(tmp_path):
    path = write_jsonl(tmp_path / "h.jsonl", [{"id": "h1", "text": page_html("Page title", "Readable words here. " * 30)}])
    docs = list(iter_jsonl_documents([path], html=True))
    assert docs[0].title == "Page title"
    assert docs[0].text.split()[:3] == ["Readable", "words", "here."] and "Login" not in docs[0].text


def make_warc(path):
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    def response(writer, url, status, content_type, body: bytes):
        headers = StatusAndHeaders(status, [("Content-Type", content_type)], protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=headers))

    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        w.write_record(w.create_warcinfo_record("crawl.warc.gz", {"software": "test"}))
        req = StatusAndHeaders("GET / HTTP/1.1", [("Host", "a.example")], is_http_request=True)
        w.write_record(w.create_warc_record("http://a.example/", "request", payload=io.BytesIO(b""), http_headers=req))
        response(w, "http://a.example/", "200 OK", "text/html; charset=utf-8",
                 page_html("A page", "English words about coffee. " * 40).encode())
        response(w, "http://b.example/fr", "200 OK", "text/html; charset=windows-1252",
                 page_html("Caf\u00e9", "Le caf\u00e9 est tr\u00e8s bon. " * 30).encode("cp1252"))
        response(w, "http://c.example/notes.txt", "200 OK", "text/plain", b"plain text notes " * 5)
        response(w, "http://a.example/", "200 OK", "text/html", page_html("Again", "same url again " * 20).encode())
        response(w, "http://d.example/paper.pdf", "200 OK", "application/pdf", b"%PDF-1.4 ...")
        response(w, "http://e.example/gone", "404 Not Found", "text/html", b"<html>gone</html>")
        response(w, "http://f.example/empty", "200 OK", "text/html", b"<html><body></body></html>")


def test_warc_records_become_cleaned_documents(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    make_warc(path)
    report = BuildReport("t", "t")
    docs = list(iter_warc_documents([path], report))
    assert [d.source for d in docs] == ["http://a.example/", "http://b.example/fr", "http://c.example/notes.txt"]
    assert docs[0].title == "A page" and "Home News" not in docs[0].text
    assert "Le café est très bon." in docs[1].text  # windows-1252 decoded
    assert docs[2].text.strip().startswith("plain text notes")
    assert report.documents_read == 7 and report.documents_used == 3
    assert dict(report.skipped) == {"repeated url": 1, "content type application/pdf": 1, "http status 404": 1,
                                    "no text after cleaning": 1}
    store, rep = build_web(tmp_path / "s", warc=[path], progress=False)
    # a.example: 40 x 4 = 160 words -> 2 passages; b.example: 30 x 5 = 150 -> 2; the 15-word text file -> 1.
    from collections import Counter

    assert Counter(p.source for p in store) == {"http://a.example/": 2, "http://b.example/fr": 2, "http://c.example/notes.txt": 1}
    assert rep.passages_written == len(store) == 5


def test_not_a_warc_is_a_named_error(tmp_path):
    path = tmp_path / "x.warc"
    path.write_text("hello, not a warc\n")
    with pytest.raises(InputError, match=r"x.warc: not a readable WARC file"):
        list(iter_warc_documents([path]))
    # A jsonl file passed as --warc: warcio reads it as headerless records (only warning), so the check is ours.
    jsonl = tmp_path / "corpus.jsonl"
    write_jsonl(jsonl, [{"id": f"d{n}", "text": "some text " * 20} for n in range(3)])
    with pytest.raises(InputError, match=r"corpus.jsonl: not a readable WARC file \(starts with b'\{\"id\"'"):
        list(iter_warc_documents([jsonl]))


def test_cli_refuses_zero_words_per_passage(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    write_jsonl(tmp_path / "c.jsonl", [{"id": "d", "text": "a few words"}])
    result = CliRunner().invoke(app, ["corpus", "build", "web", "--jsonl", str(tmp_path / "c.jsonl"), "--words", "0",
                                      "--out", str(tmp_path / "s"), "-q"])
    assert result.exit_code == 2  # a usage error, not a ValueError from the splitter
    assert "--words" in result.output and not (tmp_path / "s.building").exists()
    result = CliRunner().invoke(app, ["corpus", "build", "wikipedia", "--dump", str(tmp_path / "c.jsonl"), "--workers", "0",
                                      "--out", str(tmp_path / "w"), "-q"])
    assert result.exit_code == 2 and "--workers" in result.output  # was silently taken as one worker


def test_cli_web_jsonl_with_shell_expanded_files(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    for n in range(3):
        write_jsonl(tmp_path / f"shard-{n}.jsonl", [{"id": f"d{n}", "text": f"document {n} words"}])
    runner = CliRunner()
    # What a shell makes of `--jsonl shard-*.jsonl`: the first file after --jsonl, the rest as arguments.
    files = [str(tmp_path / f"shard-{n}.jsonl") for n in range(3)]
    result = runner.invoke(app, ["corpus", "build", "web", "--jsonl", files[0], files[1], files[2], "--out", str(tmp_path / "s"), "-q"])
    assert result.exit_code == 0, result.output
    from berds.corpora.docstore import PassageStore

    assert list(PassageStore.open(tmp_path / "s").ids()) == ["d0-0", "d1-0", "d2-0"]
    # A quoted pattern is expanded by berds itself.
    result = runner.invoke(app, ["corpus", "build", "web", "--jsonl", str(tmp_path / "shard-*.jsonl"), "--out", str(tmp_path / "t"), "-q"])
    assert result.exit_code == 0, result.output
    assert len(PassageStore.open(tmp_path / "t")) == 3
