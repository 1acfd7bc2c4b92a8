"""Reader ``aspec``: ASPEC-JE's released ` ||| ` files (the fixture in tests/data/presets/ has the
release's layout and field order), bad input quarantined or refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_readers_common import reasons, run

from pipeline_lib.ingest import InputError, Limits, SpecError, reader_module
from pipeline_lib.ingest.aspec import fields_of

ROOT = Path(__file__).resolve().parents[3]
JE = ROOT / "tests" / "data" / "presets" / "data" / "aspec" / "ASPEC" / "ASPEC-JE"
TRAIN = [str(JE / "train" / "train-1.txt"), str(JE / "train" / "train-2.txt")]
RELEASE = Limits(max_line_chars=2000)     # the ingest default

def lines(path: str | Path) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def spec(source: str | None = None, **splits: dict) -> dict:
    return {"reader": "aspec", **({"source": source} if source else {}), "splits": splits}


def test_the_release_layout_is_read_into_one_sentence_documents():
    kept, bad = run(spec(train={"file": TRAIN}, dev={"file": str(JE / "dev" / "dev.txt")},
                         test={"file": str(JE / "test" / "test.txt")}), RELEASE)
    assert not bad
    n = {p: len(lines(p)) for p in [*TRAIN, str(JE / "dev" / "dev.txt"), str(JE / "test" / "test.txt")]}
    assert len(kept) == sum(n.values())
    assert [s.split for s in kept].count("train") == n[TRAIN[0]] + n[TRAIN[1]]
    first = lines(TRAIN[0])[0].split(" ||| ")
    assert len(first) == 5 and kept[0].src == first[3] and kept[0].tgt == [first[4]]
    assert (kept[0].doc_id, kept[0].sent_idx, kept[0].has_context) == ("train-1.txt:1", 0, False)
    assert (kept[0].origin_file, kept[0].origin_line) == (TRAIN[0], 1)
    assert kept[n[TRAIN[0]]].doc_id == "train-2.txt:1"          # files in the order given
    dev = [s for s in kept if s.split == "dev"]
    assert dev[0].src == lines(JE / "dev" / "dev.txt")[0].split(" ||| ")[2]
    assert all("|||" not in s.src and "|||" not in s.tgt[0] for s in kept)
    assert reader_module("aspec").input_files(spec(train={"file": TRAIN})) == TRAIN


def test_source_en_reads_english_to_japanese():
    (ja_en,), _ = run(spec(test={"file": str(JE / "test" / "test.txt"), "max_pairs": 1}), RELEASE)
    (en_ja,), _ = run(spec("en", test={"file": str(JE / "test" / "test.txt"), "max_pairs": 1}),
                      RELEASE)
    assert (en_ja.src, en_ja.tgt) == (ja_en.tgt[0], [ja_en.src])


def test_max_pairs_takes_the_first_lines_across_the_files():
    """Deguchi et al. train on "the first 1.5 million translation pairs": train-1 then train-2."""
    n1 = len(lines(TRAIN[0]))
    kept, _ = run(spec(train={"file": TRAIN, "max_pairs": n1 + 3}), RELEASE)
    assert len(kept) == n1 + 3 and kept[-1].doc_id == "train-2.txt:3"


def test_the_number_of_fields_follows_the_file_name():
    assert fields_of("ASPEC-JE/train/train-3.txt") == 5
    assert [fields_of(f"x/{n}.txt") for n in ("dev", "devtest", "test")] == [4, 4, 4]


def test_bad_lines_are_quarantined_with_their_reason_file_and_line(tmp_path):
    good = ["0.99 ||| A-1 ||| 1 ||| 試料を測定した。 ||| We measured it.",
            "0.95 ||| A-1 ||| 2 ||| 手法を提案した。 ||| We proposed a method."]
    path = tmp_path / "train-1.txt"
    path.write_bytes("\n".join([
        good[0],
        "0.9 ||| A-1 ||| 3 ||| 日本語だけ",                                 # a field missing
        "0.9 ||| A-1 ||| 4 ||| 余分な ||| 区切り ||| extra separator",     # one field too many
        "0.9 ||| A-1 ||| 5 |||  ||| An empty Japanese side.",               # empty side
        "0.9 ||| A-1 ||| 6 ||| 長い" + "あ" * 50 + " ||| Too long.",        # over max_line_chars
        good[1],
    ]).encode() + b"\n0.9 ||| A-1 ||| 8 ||| \xff\xfe ||| Bad bytes.\n"
        + "0.9 ||| A-1 ||| 9 ||| 制御\x1b文字 ||| Control.\n".encode()
        + "0.8 ||| A-1 ||| 10 ||| 途中で切れ".encode())            # a truncated last line
    kept, bad = run(spec(train={"file": str(path)}), Limits(max_line_chars=40))
    assert len(kept) + len(bad) == 9
    assert [s.origin_line for s in kept] == [1, 6]
    assert reasons(bad) == {"field_count": 3, "empty_segment": 1, "too_long": 1,
                            "undecodable_bytes": 1, "control_character": 1}
    at = {r.origin_line: r.reason for r in bad}
    assert at == {2: "field_count", 3: "field_count", 4: "empty_segment", 5: "too_long",
                  7: "undecodable_bytes", 8: "control_character", 9: "field_count"}
    assert all(r.origin_file == str(path) for r in bad)
    assert next(r for r in bad if r.origin_line == 2).record == "0.9 ||| A-1 ||| 3 ||| 日本語だけ"


def test_unreadable_files_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="cannot open"):
        run(spec(test={"file": str(tmp_path / "test.txt")}))
    utf16 = tmp_path / "test.txt"
    utf16.write_bytes("1 ||| D ||| 日本語 ||| English\n".encode("utf-16"))
    with pytest.raises(InputError, match="UTF-16"):
        run(spec(test={"file": str(utf16)}))


@pytest.mark.parametrize("entry, says", [
    (spec("fr", test={"file": "test.txt"}), "`source` must be one of"),
    (spec(test={"src": "test.txt"}), "has no key"),
    (spec(test={"file": "test.txt", "max_pairs": 0}), "a positive integer"),
    (spec(test={"file": "test.txt", "max_pairs": "10"}), "a positive integer"),
    (spec(mono={"file": "x.txt"}), "is not one of"),
])
def test_entries_the_reader_cannot_use_are_refused(entry, says):
    with pytest.raises(SpecError, match=says):
        run(entry)
