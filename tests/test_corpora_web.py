"""Web snapshots: jsonl field detection (CCNet, Sphere, explicit), HTML records, WARC archives, CLI."""

from __future__ import annotations

import io
import json

import pytest

from berds.corpora.build import BuildReport
from berds.corpora.docstore import PassageStore
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


def test_ids_and_fields_that_would_fall_back_silently_are_refused(tmp_path):
    # a float id would be stored as "1.5" (NaN as "nan"); a mistyped --id-field gave FILE:LINE ids; an empty file
    # built an empty store with exit 0
    path = write_jsonl(tmp_path / "floats.jsonl", [{"id": 1, "text": "a b"}, {"id": 1.5, "text": "c d"}])
    with pytest.raises(InputError, match=r"floats.jsonl, line 2: the id field 'id' must be a string or an integer, got float"):
        list(iter_jsonl_documents([path]))
    path = write_jsonl(tmp_path / "ids.jsonl", [{"doc": "d1", "text": "a b"}])
    with pytest.raises(InputError, match=r"ids.jsonl, line 1: the id field 'docid' is not in the record.*--id-field"):
        list(iter_jsonl_documents([path], fields=JsonlFields(id="docid")))
    with pytest.raises(InputError, match=r"the title field 'titel' is not in the record.*--title-field"):
        list(iter_jsonl_documents([path], fields=JsonlFields(title="titel")))
    assert [d.id for d in iter_jsonl_documents([path], fields=JsonlFields(id="doc"))] == ["d1"]
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(InputError, match=r"empty.jsonl: holds no records"):
        list(iter_jsonl_documents([tmp_path / "empty.jsonl"]))


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


def pages_warc(path, n: int = 5, *, gzip: bool = True, url: bool = True):
    """A WARC of ``n`` HTML responses (``url=False``: the responses lack WARC-Target-URI)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=gzip)
        for i in range(n):
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            body = page_html(f"Page {i}", f"word{i} " * 300).encode()
            record = w.create_warc_record(f"http://x.example/{i}", "response", payload=io.BytesIO(body), http_headers=headers)
            if not url:
                record.rec_headers.remove_header("WARC-Target-URI")
            w.write_record(record)
    return path


def test_a_cut_or_garbage_gzip_warc_is_an_input_error_not_ctrl_c(tmp_path, capsys):
    from berds.cli import main

    path = tmp_path / "t.warc.gz"
    path.write_bytes(b"\x1f\x8b")  # gzip's magic and nothing else: gzip raises EOFError, which click calls a Ctrl-C
    with pytest.raises(InputError, match=r"t.warc.gz: truncated or not a gzip WARC"):
        list(iter_warc_documents([path]))
    with pytest.raises(SystemExit) as exit_:
        main(["corpus", "build", "web", "--warc", str(path), "--out", str(tmp_path / "o"), "-q"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "truncated or not a gzip WARC" in err and "interrupted" not in err, err
    path.write_bytes(b"\x1f\x8b" + b"garbage, not deflate data" * 4)
    with pytest.raises(InputError, match=r"t.warc.gz: truncated or not a gzip WARC"):
        list(iter_warc_documents([path]))


def test_a_truncated_warc_is_refused_naming_the_record(tmp_path):
    full = pages_warc(tmp_path / "full.warc.gz")
    assert len(list(iter_warc_documents([full]))) == 5
    half = tmp_path / "half.warc.gz"
    half.write_bytes(full.read_bytes()[: full.stat().st_size // 2])  # ends inside record 3's gzip member
    with pytest.raises(InputError, match=r"half.warc.gz: .*WARC record 3\b.*is the file truncated"):
        build_web(tmp_path / "s", warc=[half], progress=False)
    assert not (tmp_path / "s").exists()
    plain = pages_warc(tmp_path / "full.warc", gzip=False)
    cut = tmp_path / "cut.warc"
    cut.write_bytes(plain.read_bytes()[:-300])  # the last body is 296 bytes short (and its 4 closing bytes gone)
    with pytest.raises(InputError, match=r"cut.warc: WARC record 5 \(http://x.example/4\) ends after [\d,]+ of the "
                                         r"[\d,]+ bytes its Content-Length gives — is the file truncated"):
        list(iter_warc_documents([cut]))
    headers_cut = tmp_path / "headers.warc"  # cut inside record 2's headers: warcio would stop there quietly
    data = plain.read_bytes()
    second = data.index(b"WARC/1", 10)
    headers_cut.write_bytes(data[: second + 40])
    with pytest.raises(InputError, match=r"headers.warc: .*WARC record 2\b"):
        list(iter_warc_documents([headers_cut]))


def test_a_response_without_target_uri_is_named(tmp_path):
    path = pages_warc(tmp_path / "nourl.warc.gz", n=2, url=False)
    with pytest.raises(InputError, match=r"nourl.warc.gz: WARC record 1 cannot be read .*WARC-Target-URI"):
        list(iter_warc_documents([path]))


def test_a_duplicate_id_names_the_input_file_and_line(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_jsonl(tmp_path / "a" / "data.jsonl", [{"text": "hello world"}])
    second = write_jsonl(tmp_path / "b" / "data.jsonl", [{"text": "other words"}])
    third = write_jsonl(tmp_path / "c.jsonl", [{"text": "third"}])
    # records without ids are "<stem>:<line>", and where two files share a stem, "<folder>/<stem>:<line>"
    build_web(tmp_path / "s", jsonl=[first, second, third], progress=False)
    from berds.corpora.docstore import PassageStore

    assert sorted(PassageStore.open(tmp_path / "s").ids()) == ["a/data:1-0", "b/data:1-0", "c:1-0"]
    again = write_jsonl(tmp_path / "e.jsonl", [{"id": "a/data:1", "text": "again"}])  # (a file given twice: named so)
    with pytest.raises(InputError, match=r"e.jsonl, line 1: duplicate passage id 'a/data:1-0' .*--id-field"):
        build_web(tmp_path / "s2", jsonl=[first, second, again], progress=False)
    fourth = write_jsonl(tmp_path / "d.jsonl", [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}, {"id": "x", "text": "3"}])
    with pytest.raises(InputError, match=r"d.jsonl, line 3: duplicate passage id 'x'"):
        build_web(tmp_path / "t", jsonl=[fourth], as_passages=True, progress=False)


def test_resume_compares_each_input_beyond_its_first_64_kib(tmp_path):
    from berds.corpora.build import HEAD_BYTES, build_identity, resume_problem

    lines = [json.dumps({"id": f"d{i}", "text": f"document {i} " + "word " * 40}) + "\n" for i in range(600)]
    full = "".join(lines)
    assert len(full) > 2 * HEAD_BYTES
    cut = int(len(full) * 0.8) + 7  # a download cut short, inside a record
    path = tmp_path / "c.jsonl"
    path.write_text(full[:cut])
    with pytest.raises(InputError, match=r"c.jsonl, line \d+"):
        build_web(tmp_path / "s", jsonl=[path], as_passages=True, shard_size=50, progress=False)
    # Another corpus with the same first 64 KiB: resuming would mix the two.
    path.write_text(full.replace("document 400 ", "document 4000 "))
    with pytest.raises(InputError, match=r"cannot resume: .*c.jsonl is not the input the interrupted build read"):
        build_web(tmp_path / "s", jsonl=[path], as_passages=True, shard_size=50, resume=True, progress=False)
    # The completed download of the file the build read resumes to the store an uninterrupted build gives.
    path.write_text(full)
    store, report = build_web(tmp_path / "s", jsonl=[path], as_passages=True, shard_size=50, resume=True, progress=False)
    assert report.passages_resumed > 0 and len(store) == 600
    assert store.fingerprint == build_web(tmp_path / "ref", jsonl=[path], as_passages=True, progress=False)[0].fingerprint
    # A checkpoint written before whole-input hashes: the head check still decides.
    recorded = build_identity({"source": {"path": str(path)}})
    assert recorded is not None
    for entry in recorded["inputs"]:
        del entry["sha256"]
    path.write_text(full.replace("document 400 ", "document 4000 "))
    assert resume_problem(recorded, build_identity({"source": {"path": str(path)}})) is None


@pytest.mark.parametrize("kind", ["gzip", "bz2"])
def test_a_compressed_jsonl_is_named_as_compressed(tmp_path, kind):
    # the error was "not UTF-8 text ... re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
    import importlib

    shard = tmp_path / "shard.json.gz"
    shard.write_bytes(importlib.import_module(kind).compress(b'{"id": "a", "text": "some words"}\n'))
    with pytest.raises(InputError, match=rf"shard.json.gz: is {kind}-compressed; jsonl input must be plain text"):
        build_web(tmp_path / "s", jsonl=[shard], progress=False)


def test_a_folder_given_as_jsonl_input_is_named_as_a_folder_with_the_pattern_to_use(tmp_path):
    """``--jsonl shards/`` said 'file not found' about a folder that plainly exists."""
    from berds.corpora.web import build_web

    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.jsonl").write_text('{"id": "a", "text": "hello world"}\n')
    with pytest.raises(InputError, match=r"is a folder; give the files in it — pass a glob pattern in quotes, "
                                         r"e.g. --jsonl '.*shards/\*.jsonl'"):
        build_web(tmp_path / "store", jsonl=[tmp_path / "shards"])


def test_a_build_that_yields_no_passage_is_refused_and_replaces_nothing(tmp_path):
    # every record empty gave an empty store (exit 0) that indexed and searched without complaint; with
    # overwrite it replaced a good store
    good = build_web(tmp_path / "store", jsonl=[write_jsonl(tmp_path / "good.jsonl", [{"id": "a", "text": "some words"}])],
                     progress=False)[0]
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"id": "a", "text": " "}, {"id": "b", "text": ""}])
    with pytest.raises(InputError, match=r"blank.jsonl: no passages to store \(2 documents read, skipped: empty text 2\); "
                                         r".*store is left as it was"):
        build_web(tmp_path / "store", jsonl=[blank], overwrite=True, progress=False)
    assert PassageStore.open(tmp_path / "store").fingerprint == good.fingerprint
    with pytest.raises(InputError, match=r"no passages to store .*new is not created"):
        build_web(tmp_path / "new", jsonl=[blank], progress=False)
    assert not (tmp_path / "new").exists() and not (tmp_path / "new.building").exists()


def test_ids_an_index_cannot_carry_are_refused_by_line_and_file_names_give_indexable_ids(tmp_path):
    # a record id with a space, or a file named "my docs.jsonl" naming id-less records "my docs:1", built a store
    # whose every index build then failed
    path = write_jsonl(tmp_path / "spaced.jsonl", [{"id": "a", "text": "x"}, {"id": "b\u00a0c", "text": "y"}])
    with pytest.raises(InputError, match=r"spaced.jsonl, line 2: the id 'b\\xa0c' \(field 'id'\) holds whitespace"):
        list(iter_jsonl_documents([path]))
    (tmp_path / "a b").mkdir()
    named = write_jsonl(tmp_path / "my docs.jsonl", [{"text": "x"}])
    other = write_jsonl(tmp_path / "a b" / "my docs.jsonl", [{"text": "y"}])
    assert [d.id for d in iter_jsonl_documents([named])] == ["my_docs:1"]
    assert [d.id for d in iter_jsonl_documents([named, other])] == ["my_docs:1", "a_b/my_docs:1"]


def test_the_summary_rate_counts_only_the_passages_this_run_wrote():
    from rich.console import Console

    report = BuildReport(kind="web (jsonl)", out="x", passages_written=1000, passages_resumed=800, seconds=2.0)
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(report.table())
    assert "2.0 s (100 passages/s)" in console.export_text()  # was 500/s, the kept 800 counted as written


def test_a_jsonl_build_follows_the_input_bytes_read(tmp_path):
    # jsonl builds showed elapsed time only, no bar or ETA, though the input sizes are known
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": f"d{i}", "text": "some words " * 20} for i in range(3)])
    read = [0]
    docs = iter_jsonl_documents([path], read_bytes=read)
    next(docs)
    assert read[0] == len(path.read_bytes().splitlines(keepends=True)[0])
    list(docs)
    assert read[0] == path.stat().st_size


def test_options_a_build_would_ignore_are_refused(tmp_path):
    # --words with --as-passages, and --html with --warc, were accepted and did nothing
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "d1", "text": "some words"}])
    with pytest.raises(InputError, match=r"--words does not apply with --as-passages"):
        build_web(tmp_path / "s", jsonl=[path], as_passages=True, words_per_passage=50, progress=False)
    with pytest.raises(InputError, match=r"--html and the --\*-field options apply to jsonl records only"):
        build_web(tmp_path / "s", warc=[path], html=True, progress=False)
    with pytest.raises(InputError, match=r"--html and the --\*-field options apply to jsonl records only"):
        build_web(tmp_path / "s", warc=[path], fields=JsonlFields(title="t"), progress=False)
    assert not (tmp_path / "s").exists()


def test_an_input_file_given_twice_is_named_as_such(tmp_path):
    # overlapping patterns gave "d.jsonl, line 1: duplicate passage id" (and a WARC's second copy was skipped as
    # repeated urls)
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "d1", "text": "some words"}])
    with pytest.raises(InputError, match=r"d.jsonl: is given twice as input"):
        build_web(tmp_path / "s", jsonl=[path, tmp_path / "." / "d.jsonl"], progress=False)


def test_a_passage_the_store_refuses_is_named_by_input_file_and_line(tmp_path):
    # a lone surrogate (a broken \uXXXX escape) was named by the store folder and passage only
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": "bad \\ud800 escape"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"s.jsonl, line 2: passage 'b-0' holds a lone surrogate .* — fix the source text"):
        build_web(tmp_path / "store", jsonl=[path], progress=False)


def test_the_summary_shows_which_record_fields_were_read(tmp_path):
    # detected per file from its first record, they went only into the manifest: a file read without ids (so
    # named by line) looked like any other in the table
    from rich.console import Console

    with_ids = write_jsonl(tmp_path / "a.jsonl", [{"id": "a1", "raw_content": "some words"}])
    without = write_jsonl(tmp_path / "b.jsonl", [{"raw_content": "other words"}])
    _, report = build_web(tmp_path / "s", jsonl=[with_ids, without], progress=False)
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(report.table())
    text = console.export_text()
    text = " ".join(text.split())
    assert "fields read: text=raw_content (no id: FILE:LINE) (1 file); text=raw_content id=id (1 file)" in text, text
    # in 80 columns (a pipe, a CI log) the rows' labels stay whole beside long field names
    report.passages_resumed = 1
    report.extra["jsonl_fields"] = {"x.jsonl": {"text": "raw_content", "title": "title", "url": "url", "id": "docid"}}
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(report.table())
    assert "of which kept from the interrupted build" in console.export_text()


def test_an_empty_warc_is_named_empty(tmp_path):
    # it failed as "not a readable WARC file (starts with b'', expected b'WARC/')"
    (tmp_path / "c.warc.gz").write_bytes(b"")
    with pytest.raises(InputError, match=r"c.warc.gz: is empty \(0 bytes\)"):
        build_web(tmp_path / "s", warc=[tmp_path / "c.warc.gz"], progress=False)


def test_a_build_refused_before_its_first_commit_leaves_no_building_folder(tmp_path):
    # every input error left an empty <out>.building/, and `corpus info` then advised a --resume of nothing
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\n{"id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"d.jsonl, line 2: not UTF-8"):
        build_web(tmp_path / "s", jsonl=[path], progress=False)
    assert not (tmp_path / "s.building").exists()
    path.write_bytes(b'{"id": "a", "text": "x"}\n{"id": "c", "text": "y"}\n{"id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"d.jsonl, line 3: not UTF-8"):
        build_web(tmp_path / "s", jsonl=[path], shard_size=1, progress=False)
    assert (tmp_path / "s.building" / "data.mdb").is_file()  # committed passages stay for --resume
