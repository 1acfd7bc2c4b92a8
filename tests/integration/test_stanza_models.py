"""stanza_models: real stanza trainers on the shared UD Spanish-GSD files (tiny model, few steps),
the reuse of kept models, the missing-model message, and both download paths (UD files and
stanza.download) against a local HTTP server."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import threading
from pathlib import Path

import pytest

from pipeline_lib.parse import stanza_models as sm
from pipeline_lib.parse.dependencies import valid_tree

TREEBANK = {"name": "UD_Spanish-GSD", "prefix": "es_gsd"}
TINY = {"tagger_steps": 8, "parser_steps": 8, "hidden_dim": 32, "deep_biaff_hidden_dim": 32,
        "word_emb_dim": 16, "tag_emb_dim": 8, "transformed_dim": 16, "parser_layers": 1}


def _spec(**kw) -> dict:
    return {"download": False, "treebanks": {"es": TREEBANK}, "training": TINY, **kw}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, shared_dir):
    """One tiny Spanish model trained through the CLI (the path offline machines take)."""
    if not (shared_dir / "ud" / TREEBANK["name"]).is_dir():
        pytest.skip(f"no UD treebank under {shared_dir}/ud")
    root = tmp_path_factory.mktemp("stanza")
    args = ["--lang", "es", "--spec", json.dumps(_spec()), "--shared-dir", str(shared_dir),
            "--resources-dir", str(root / "resources" / "stanza"), "--out-dir", str(root / "out"),
            "--threads", "1"]
    assert sm.main(args) == 0
    return root, args


@pytest.mark.slow
def test_trained_model_manifest_and_reuse(trained):
    root, args = trained
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    assert manifest["source"] == "trained" and manifest["reused"] is False
    ev = manifest["evaluation"]
    assert ev["file"].endswith("es_gsd-ud-test.conllu") and ev["sentences"] == 427
    assert 0 <= ev["las"] <= ev["uas"] <= 100 and ev["sentences_per_s"] > 0
    kept = root / "resources" / "stanza" / "trained" / "es"
    assert (kept / "tagger.pt").is_file() and (kept / "parser.pt").is_file()
    # held-out discipline: the training copy comes from the dev file only, UPOS only
    train_text = (kept / "data" / "train.conllu").read_text()
    first_word = next(line for line in train_text.splitlines() if line and line[0].isdigit())
    assert first_word.split("\t")[4:6] == ["_", "_"]
    # a second run reuses the kept models instead of training again
    before = (kept / "parser.pt").stat().st_mtime_ns
    assert sm.main(args) == 0
    again = json.loads((root / "out" / "manifest.json").read_text())
    assert again["source"] == "trained" and again["reused"] is True
    assert (kept / "parser.pt").stat().st_mtime_ns == before


@pytest.mark.slow
def test_trained_model_parses_real_sentences_into_trees(trained, shared_dir):
    root, _ = trained
    nlp = sm.load_pipeline(root / "out" / "model.json", threads=1)
    gold = sm.read_gold(shared_dir / "ud" / TREEBANK["name"] / "es_gsd-ud-test.conllu")[:20]
    doc = nlp([g["words"] for g in gold])
    assert len(doc.sentences) == 20
    for g, sent in zip(gold, doc.sentences):
        heads = [w.head for w in sent.words]
        assert [w.text for w in sent.words] == g["words"]
        assert valid_tree(heads), heads
        assert all(w.upos for w in sent.words) and all(w.deprel for w in sent.words)


def test_missing_model_names_the_three_ways(tmp_path, caplog):
    cfg = sm.StanzaConfig.from_dict({"download": False, "train": True,
                                     "treebanks": {"xx": {"name": "UD_Nowhere-X", "prefix": "xx_x"}},
                                     "ud_url": "http://127.0.0.1:9"})
    with pytest.raises(sm.MissingModelError) as err:
        sm.provide("xx", cfg, tmp_path / "shared", tmp_path / "resources" / "stanza")
    msg = str(err.value)
    assert "stanza.model_dir" in msg and "stanza.download" in msg and "UD treebank" in msg
    assert "UD_Nowhere-X" in msg and "DOCMT_SHARED" in msg
    args = ["--lang", "xx", "--spec", json.dumps({"download": False, "train": False}),
            "--shared-dir", str(tmp_path), "--resources-dir", str(tmp_path / "r"),
            "--out-dir", str(tmp_path / "out")]
    assert sm.main(args) == 2
    assert not (tmp_path / "out" / "model.json").exists()


class _Server:
    """A static HTTP server on 127.0.0.1 serving one folder (stands in for GitHub / stanza)."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
        handler.log_message = lambda *a: None
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_ud_treebank_downloaded_when_not_shared(tmp_path, shared_dir):
    src = shared_dir / "ud" / TREEBANK["name"]
    if not src.is_dir():
        pytest.skip("no shared UD treebank to serve")
    served = tmp_path / "www" / TREEBANK["name"] / "abc123"
    served.mkdir(parents=True)
    for part in ("dev", "test"):
        shutil.copy(src / f"es_gsd-ud-{part}.conllu", served)
    server = _Server(tmp_path / "www")
    try:
        tb = sm.Treebank(commit="abc123", **TREEBANK)
        got = sm.fetch_treebank(tb, tmp_path / "empty_shared", tmp_path / "ud", server.url)
    finally:
        server.close()
    assert got == tmp_path / "ud" / TREEBANK["name"] / "abc123"
    assert (got / "es_gsd-ud-test.conllu").read_bytes() == (src / "es_gsd-ud-test.conllu").read_bytes()


@pytest.mark.slow
def test_stanza_download_from_mirror(trained, tmp_path):
    """stanza.download with resources_url/model_url pointing at a local mirror of our models."""
    root, _ = trained
    kept = root / "resources" / "stanza" / "trained" / "es"
    www = tmp_path / "www"
    (www / "es" / "pos").mkdir(parents=True)
    (www / "es" / "depparse").mkdir(parents=True)
    shutil.copy(kept / "tagger.pt", www / "es" / "pos" / "tiny.pt")
    shutil.copy(kept / "parser.pt", www / "es" / "depparse" / "tiny.pt")
    md5 = {p: hashlib.md5((www / "es" / p / "tiny.pt").read_bytes()).hexdigest() for p in ("pos", "depparse")}
    from stanza.resources.common import DEFAULT_RESOURCES_VERSION

    server = _Server(www)
    resources = {"es": {"lang_name": "Spanish",
                        "pos": {"tiny": {"md5": md5["pos"]}},
                        "depparse": {"tiny": {"md5": md5["depparse"]}}},
                 "url": server.url + "/{lang}/{filename}"}
    (www / f"resources_{DEFAULT_RESOURCES_VERSION}.json").write_text(json.dumps(resources))
    cfg = sm.StanzaConfig.from_dict({"package": "tiny", "download": True, "train": False,
                                     "resources_url": server.url})
    try:
        desc = sm.provide("es", cfg, tmp_path / "shared", tmp_path / "resources" / "stanza")
    finally:
        server.close()
    assert desc["source"] == "downloaded"
    assert (tmp_path / "resources" / "stanza" / "downloaded" / "es" / "depparse" / "tiny.pt").is_file()
    doc = sm.load_pipeline(desc)([["La", "casa", "es", "grande", "."]])
    assert valid_tree([w.head for w in doc.sentences[0].words])
