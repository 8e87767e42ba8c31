"""Wikipedia: DPR tsv as published, XML dumps (namespaces, redirects, markup), streaming, resume, CLI."""

from __future__ import annotations

import bz2
import csv
import tracemalloc
from xml.sax.saxutils import escape

import pytest

from berds.corpora.build import BuildReport
from berds.corpora.docstore import PassageStore
from berds.corpora.wikipedia import build_wikipedia, iter_dump_documents, iter_dump_pages, read_dpr_tsv, wikitext_to_text
from berds.errors import InputError
from berds.types import Passage

AARON = """{{Infobox religious biography|name=Aaron|image=Aaron.jpg}}
'''Aaron''' ( or ; {{lang-he|אַהֲרֹן}}) is a [[prophet]], [[High priest|high priest]], and the brother of [[Moses]].<ref>{{cite book|title=Exodus}}</ref>
[[File:Aaron.jpg|thumb|A painting of Aaron]]
== Life ==
According to the [[Book of Exodus|Exodus]], Aaron &amp; Moses spoke to [[Pharaoh]].<ref name="ex"/>
* a list item DPR dropped
{| class="wikitable"
|-
| a table cell || another
|}
<!-- an editor's comment -->
He died on [[Mount Hor]].
[[Category:Prophets]]
[[de:Aaron]]"""


def page(title: str, pid: int, text: str, ns: int = 0, redirect: str | None = None) -> str:
    red = f'<redirect title="{escape(redirect)}" />' if redirect else ""
    return (f"<page><title>{escape(title)}</title><ns>{ns}</ns><id>{pid}</id>{red}<revision><id>{pid * 10}</id>"
            f'<text bytes="{len(text)}" xml:space="preserve">{escape(text)}</text></revision></page>\n')


def dump(pages: list[str]) -> str:
    return ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">\n'
            "<siteinfo><sitename>Wikipedia</sitename><namespaces><namespace key=\"0\" case=\"first-letter\" /></namespaces></siteinfo>\n"
            + "".join(pages) + "</mediawiki>\n")


SMALL_DUMP = dump([
    page("Aaron", 12, AARON),
    page("Talk:Aaron", 13, "Is this article neutral? ~~~~", ns=1),
    page("User:Someone", 14, "My user page", ns=2),
    page("Aron", 15, "#REDIRECT [[Aaron]]", redirect="Aaron"),
    page("Mercury", 16, "'''Mercury''' may refer to:\n* [[Mercury (planet)]]\n{{disambiguation}}"),
    page("Blank", 17, "{{Infobox only|a=1}}"),
    page("Long article", 18, "'''Long article''' " + " ".join(f"word{i}" for i in range(1, 231))),
])


def test_wikitext_to_text_strips_markup_like_dpr():
    assert wikitext_to_text(AARON) == (
        "Aaron ( or ; ) is a prophet, high priest, and the brother of Moses.\n"
        "Life\n"
        "According to the Exodus, Aaron & Moses spoke to Pharaoh.\n"
        "He died on Mount Hor."
    )
    assert "a list item" in wikitext_to_text(AARON, keep_lists=True)


def test_dump_pages_keep_only_articles_and_count_the_rest(tmp_path):
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(SMALL_DUMP.encode("utf-8")))
    pages = list(iter_dump_pages(path))
    assert [(p.page_id, p.namespace, p.redirect) for p in pages] == [
        ("12", 0, False), ("13", 1, False), ("14", 2, False), ("15", 0, True), ("16", 0, False), ("17", 0, False), ("18", 0, False)]
    report = BuildReport("t", "t")
    docs = list(iter_dump_documents(path, report))
    assert [d.title for d in docs] == ["Aaron", "Long article"]
    assert report.documents_read == 7 and report.documents_used == 2
    assert dict(report.skipped) == {"not an article (namespace != 0)": 2, "redirect": 1, "disambiguation page": 1,
                                    "empty after removing markup": 1}


def test_build_from_dump_reproduces_dpr_passages(tmp_path):
    path = tmp_path / "dump.xml"
    path.write_text(SMALL_DUMP, encoding="utf-8")
    store, report = build_wikipedia(tmp_path / "wiki", dump=path, id_scheme="dpr", progress=False)
    aaron_words = ("Aaron Aaron ( or ; ) is a prophet, high priest, and the brother of Moses. Life According to the "
                   "Exodus, Aaron & Moses spoke to Pharaoh. He died on Mount Hor.")
    long_words = ["Long", "article", "Long", "article"] + [f"word{i}" for i in range(1, 231)]  # title line + bold title
    assert list(store) == [
        Passage("1", aaron_words, "Aaron", "12"),
        Passage("2", " ".join(long_words[:100]), "Long article", "18"),
        Passage("3", " ".join(long_words[100:200]), "Long article", "18"),
        Passage("4", " ".join(long_words[200:]), "Long article", "18"),
    ]
    assert report.passages_written == 4 and store.manifest["metadata"]["documents"] == 2
    assert store.manifest["metadata"]["options"]["id_scheme"] == "dpr"
    page_ids, _ = build_wikipedia(tmp_path / "wiki2", dump=path, title_in_text=False, progress=False)
    assert list(page_ids.ids()) == ["12-0", "18-0", "18-1", "18-2"]
    assert page_ids.get("12-0").text.startswith("Aaron ( or ; )")


@pytest.mark.slow
def test_parallel_markup_stripping_gives_the_same_store(tmp_path):
    pages = [page(f"Article {i}", 100 + i, f"'''Article {i}''' is [[about]] {{{{tmpl}}}} " + " ".join(f"w{j}" for j in range(i * 7)))
             for i in range(150)] + [page("Talk:X", 9, "talk", ns=1)]
    path = tmp_path / "dump.xml"
    path.write_text(dump(pages))
    one, r1 = build_wikipedia(tmp_path / "one", dump=path, progress=False)
    two, r2 = build_wikipedia(tmp_path / "two", dump=path, workers=2, progress=False)
    assert two.fingerprint == one.fingerprint and list(two.ids()) == list(one.ids())
    assert r2.skipped == r1.skipped == {"not an article (namespace != 0)": 1}
    assert len(one) > 150


def test_dump_streaming_keeps_memory_flat(tmp_path):
    def peak_for(n_pages: int) -> int:
        path = tmp_path / f"d{n_pages}.xml"
        path.write_text(dump([page(f"P{i}", i, "text " * 200) for i in range(n_pages)]))
        tracemalloc.start()
        count = sum(1 for _ in iter_dump_pages(path))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert count == n_pages
        return peak

    small, big = peak_for(300), peak_for(3000)  # ten times the pages, ~3 MB of XML
    assert big < 1.5 * small, (small, big)


def test_malformed_dumps_are_named_errors(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text(SMALL_DUMP[: len(SMALL_DUMP) // 2])
    with pytest.raises(InputError, match=r"bad.xml.*malformed XML.*is the dump truncated"):
        list(iter_dump_pages(bad))
    other = tmp_path / "other.xml"
    other.write_text("<html><body/></html>")
    with pytest.raises(InputError, match="not a MediaWiki XML export"):
        list(iter_dump_pages(other))
    fake = tmp_path / "fake.xml.bz2"
    fake.write_text("not bz2 at all")
    with pytest.raises(InputError, match="cannot read the dump"):
        list(iter_dump_pages(fake))


def test_a_page_listed_twice_in_a_dump_is_named(tmp_path):
    twice = tmp_path / "twice.xml"
    twice.write_text(dump([page("Aaron", 12, AARON), page("Other", 20, "Some words here."), page("Aaron", 12, AARON)]))
    with pytest.raises(InputError, match=r"twice.xml, record 'page 12 \(Aaron\)': duplicate passage id '12-0'"):
        build_wikipedia(tmp_path / "store", dump=twice, progress=False)
    _, report = build_wikipedia(tmp_path / "numbered", dump=twice, id_scheme="dpr", progress=False)  # the way out it names
    assert report.passages_written == 3  # Aaron (one passage) twice, Other once


def test_resume_after_a_truncated_dump(tmp_path):
    pages = [page(f"Article {i}", 100 + i, " ".join(f"w{i}x{j}" for j in range(150))) for i in range(40)]
    full = tmp_path / "full.xml"
    full.write_text(dump(pages))
    reference, _ = build_wikipedia(tmp_path / "ref", dump=full, shard_size=10, progress=False)
    # A download cut short: the build fails part way, its finished shards stay behind.
    partial = tmp_path / "partial.xml"
    text = dump(pages)
    partial.write_text(text[: int(len(text) * 0.6)])
    with pytest.raises(InputError, match="malformed XML"):
        build_wikipedia(tmp_path / "wiki", dump=partial, shard_size=10, progress=False)
    assert not (tmp_path / "wiki").exists() and (tmp_path / "wiki.building").is_dir()
    with pytest.raises(InputError, match="re-run the build with --resume"):
        PassageStore.open(tmp_path / "wiki")
    store, report = build_wikipedia(tmp_path / "wiki", dump=full, shard_size=10, resume=True, progress=False)
    assert report.passages_resumed > 0 and report.passages_resumed % 10 == 0
    assert store.fingerprint == reference.fingerprint and len(store) == 80


def test_read_dpr_tsv_with_csv_quoting(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["id", "text", "title"])
        w.writerow(["1", 'Aaron Aaron ( or ; "Ahärôn") is a prophet', "Aaron"])
        w.writerow(["2", "brother of Moses", "Aaron"])
        w.writerow(["3", "a text with\ta tab", "Tab \"quoted\" title"])
    raw = path.read_text(encoding="utf-8").splitlines()
    assert raw[1] == '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet"\tAaron'  # DPR's on-disk quoting
    report = BuildReport("t", "t")
    assert list(read_dpr_tsv(path, report)) == [
        Passage("1", 'Aaron Aaron ( or ; "Ahärôn") is a prophet', "Aaron"),
        Passage("2", "brother of Moses", "Aaron"),
        Passage("3", "a text with\ta tab", 'Tab "quoted" title'),
    ]
    assert report.documents_read == 2  # consecutive passages of one article are one document
    store, rep = build_wikipedia(tmp_path / "dpr", dpr_tsv=path, progress=False)
    assert store.get("1").text.endswith("is a prophet") and rep.passages_written == 3


@pytest.mark.parametrize("content, message", [
    ("", r"line 1: empty file"),
    ("pid\tbody\ttitle\n1\tx\tT\n", r"line 1: first line must be the header"),
    ("id\ttext\ttitle\n1\tx\tT\n2\tonly two\n", r"line 3: expected 3 tab-separated fields"),
    ("id\ttext\ttitle\n\tx\tT\n", r"line 2: empty passage id"),
    ("id\ttext\ttitle\n", r"line 2: holds no passages, only the header line"),  # was an empty store, exit 0
    # an id `berds index` refuses was only caught after the build, by passage, not line
    ("id\ttext\ttitle\n1\tx\tT\n2 \tx\tT\n", r"line 3: passage id '2 ' holds whitespace"),
])
def test_bad_dpr_tsv_names_the_line(tmp_path, content, message):
    path = tmp_path / "bad.tsv"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        list(read_dpr_tsv(path))


def test_cli_wikipedia_build_then_show(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(SMALL_DUMP.encode("utf-8")))
    runner = CliRunner()
    result = runner.invoke(app, ["corpus", "build", "wikipedia", "--dump", str(path), "--out", str(tmp_path / "w"), "-q"])
    assert result.exit_code == 0, result.output
    for row in ("documents read", "skipped: redirect", "skipped: disambiguation page", "passages written"):
        assert row in result.output
    result = runner.invoke(app, ["corpus", "show", str(tmp_path / "w"), "12-0"])
    assert result.exit_code == 0 and "Aaron ( or ; ) is a prophet" in result.output
    again = runner.invoke(app, ["corpus", "build", "wikipedia", "--dump", str(path), "--out", str(tmp_path / "w"), "-q"])
    assert again.exit_code != 0 and "already exists" in str(again.exception)


@pytest.mark.parametrize("empty", ["<id></id>", "<id> </id>", "<id/>", ""])
def test_a_page_with_an_empty_id_is_refused_by_title(tmp_path, empty):
    # an empty id gave passage ids like "-0"; a malformed page is an error, as a missing <title> or a bad <ns>
    bad = page("Nameless", 7, "'''Nameless''' has words.").replace("<ns>0</ns><id>7</id>", f"<ns>0</ns>{empty}")
    path = tmp_path / "d.xml"
    path.write_text(dump([page("Aaron", 12, AARON), bad]))
    with pytest.raises(InputError, match=r"d.xml: page 'Nameless' has an empty or missing <id>"):
        build_wikipedia(tmp_path / "w", dump=path, progress=False)


def test_tsv_errors_name_the_line_where_the_problem_is(tmp_path):
    # the decoder runs a chunk ahead of the csv reader, and a quoted field may span lines: the line named must be
    # the line of the bad byte, or where the bad record starts (was "near line 14965" and "line 4")
    rows = ["id\ttext\ttitle\n"] + [f"{i}\tsome text number {i}\tTitle {i}\n" for i in range(1, 20000)]
    data = "".join(rows).encode()
    cut = data.index(b"\n15001\t") + 1
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(data[:cut] + b"15001\tbad \xff byte\tT\n" + data[cut:])
    with pytest.raises(InputError, match=r"bad.tsv, line 15002: not UTF-8 text"):
        list(read_dpr_tsv(bad))
    quote = tmp_path / "quote.tsv"
    quote.write_text('id\ttext\ttitle\n1\t"an unbalanced quote\tT\n2\tok\tT\n3\tok\tT\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"quote.tsv, line 2: expected 3 tab-separated fields"):
        list(read_dpr_tsv(quote))


def test_a_repeated_id_in_a_dpr_tsv_names_its_line(tmp_path):
    tsv = tmp_path / "dup.tsv"
    tsv.write_text("id\ttext\ttitle\n1\tfirst text\tA\n2\tsecond text\tA\n1\tthird text\tB\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"dup.tsv, line 4: duplicate passage id '1' \(first added as passage number 1\)"):
        build_wikipedia(dpr_tsv=tsv, out=tmp_path / "store", progress=False)


@pytest.mark.parametrize("suffix, compress", [(".gz", "gzip"), (".bz2", "bz2")])
def test_a_cut_or_fake_compressed_dpr_tsv_is_a_named_error(tmp_path, suffix, compress):
    # a cut .gz raised EOFError, which the CLI reported as Ctrl-C (exit 130); a tsv named .gz, a traceback
    import gzip
    import subprocess
    import sys

    rows = "id\ttext\ttitle\n" + "".join(f"{i}\t{'word%d ' % i * 60}\tT{i}\n" for i in range(1, 2000))
    packed = (gzip if compress == "gzip" else bz2).compress(rows.encode())
    cut, fake = tmp_path / f"cut.tsv{suffix}", tmp_path / f"fake.tsv{suffix}"
    cut.write_bytes(packed[: len(packed) // 2])
    fake.write_text(rows)
    for path in (cut, fake):
        with pytest.raises(InputError, match=rf"{path.name}: cannot read the tsv .*is the file truncated"):
            build_wikipedia(tmp_path / f"w-{path.name}", dpr_tsv=path, progress=False)
    done = subprocess.run([sys.executable, "-m", "berds", "corpus", "build", "wikipedia", "--dpr-tsv", str(cut),
                           "--out", str(tmp_path / "cli"), "-q"], capture_output=True, text=True)
    assert done.returncode == 2 and f"error: {cut}: cannot read the tsv" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "Ctrl-C" not in done.stderr


def test_a_dpr_tsv_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "bom.tsv"
    path.write_bytes(b"\xef\xbb\xbfid\ttext\ttitle\n1\tsome text\tT\n")
    assert list(read_dpr_tsv(path)) == [Passage("1", "some text", "T")]


@pytest.mark.parametrize("compress", ["gzip", "bz2"])
def test_a_compressed_dump_or_tsv_without_its_suffix_is_read(tmp_path, compress):
    # a saved download that lost its .gz/.bz2 failed as "malformed XML: line 1, column 0" / "not UTF-8 text"
    import gzip

    pack = (gzip if compress == "gzip" else bz2).compress
    (tmp_path / "d.xml").write_bytes(pack(SMALL_DUMP.encode("utf-8")))
    (tmp_path / "p.tsv").write_bytes(pack(b"id\ttext\ttitle\n1\tsome text\tT\n"))
    plain = tmp_path / "plain.xml"
    plain.write_text(SMALL_DUMP, encoding="utf-8")
    assert [(d.id, d.text) for d in iter_dump_documents(tmp_path / "d.xml")] == \
        [(d.id, d.text) for d in iter_dump_documents(plain)]
    assert list(read_dpr_tsv(tmp_path / "p.tsv")) == [Passage("1", "some text", "T")]


def test_splitting_options_with_a_dpr_tsv_are_refused_not_ignored(tmp_path):
    # DPR's tsv is taken as it is: --words 50 built the same 100-word passages without a word
    path = tmp_path / "p.tsv"
    path.write_text("id\ttext\ttitle\n1\tsome text\tT\n")
    with pytest.raises(InputError, match=r"p.tsv: --words, --ids apply to --dump only"):
        build_wikipedia(tmp_path / "w", dpr_tsv=path, words_per_passage=50, id_scheme="dpr", progress=False)
    with pytest.raises(InputError, match=r"p.tsv: --no-title-in-text applies to --dump only"):
        build_wikipedia(tmp_path / "w", dpr_tsv=path, title_in_text=False, progress=False)
    assert build_wikipedia(tmp_path / "w", dpr_tsv=path, progress=False)[1].passages_written == 1


def test_blank_lines_in_a_dpr_tsv_are_skipped(tmp_path):
    # a trailing newline an editor added failed as "expected 3 tab-separated fields, got 0 — quote fields ..."
    path = tmp_path / "p.tsv"
    path.write_text("id\ttext\ttitle\n1\tsome text\tT\n\n2\tmore\tU\n\n")
    assert [p.id for p in read_dpr_tsv(path)] == ["1", "2"]


def test_an_empty_dump_is_named_empty(tmp_path):
    # it failed as "malformed XML: no element found: line 1, column 0 — is the dump truncated?"
    (tmp_path / "d.xml").write_bytes(b"")
    with pytest.raises(InputError, match=r"d.xml, line 1: is empty \(0 bytes\)"):
        build_wikipedia(tmp_path / "w", dump=tmp_path / "d.xml", progress=False)
