"""The data part of the plan: corpora and their splits, the BPE model's corpora, the shards each
training job reads, the test sets, and which corpora are parsed (stanza, parse shards).

Reads only the config and the training jobs (which corpora a parse-supervised job trains on);
:meth:`DataStages.treebank_digest` also reads the UD treebank files it names, the one input
that is content rather than config.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline_lib.layout import shared_dir
from pipeline_lib.results import Files

HEADS = "heads"   # model_settings.<job>.data: sentence pairs with subword dependency heads


def corpus_splits(spec: Mapping[str, Any]) -> set[str]:
    """The splits a corpus entry's ingestion writes: its ``splits`` keys (a union's: those of
    its parts); the bible reader makes ``train`` from every book not in ``dev_books`` /
    ``test_books``. Read before validation too (run_config), so absent keys are no error."""
    if spec.get("reader") == "bible":
        return {"train"} | {s for s in ("dev", "test") if spec.get(f"{s}_books")}
    if spec.get("reader") == "union":
        return {s for part in spec.get("parts") or [] for s in part.get("splits") or {}}
    return set(spec.get("splits") or {})

class DataStages:
    """Corpora, splits, shards and parsing (a part of :class:`pipeline_lib.plan.Plan`)."""

    @property
    def corpora(self) -> list[str]:
        return list(self.config["corpora"])

    def splits(self, corpus: str) -> set[str]:
        """The splits a corpus's ingestion writes (:func:`corpus_splits`)."""
        return corpus_splits(self.config["corpora"][corpus])

    @property
    def bpe_corpora(self) -> list[str]:
        """Corpora whose text trains the joint BPE model: ``bpe.corpora``, by default those with
        a ``train`` or ``mono`` split (pipeline_lib.preprocess.bpe reads no other). WHY not every
        corpus: a test-only corpus in train_bpe's input would retrain BPE, and so every model,
        when it changes."""
        named = self.config["bpe"]["corpora"]
        if named is None:
            return [c for c in self.corpora if self.splits(c) & {"train", "mono"}]
        for c in named:
            if c not in self.config["corpora"] or not self.splits(c) & {"train", "mono"}:
                raise ValueError(f"bpe.corpora: {c!r} is not a corpus with a train or mono "
                                 f"split (corpora: {', '.join(self.corpora)})")
        return list(named)

    @property
    def tokenize(self) -> dict[str, list[str]]:
        """Config ``tokenize`` for the run's two languages: language -> its steps (the papers'
        segmentation and casing before BPE, pipeline_lib/tokenization.py); empty
        (raw text) by default."""
        from pipeline_lib.tokenization import check_steps

        steps = self.config["tokenize"]
        chosen = {lang: list(steps[lang]) for lang in self.lang_pair if steps.get(lang)}
        for lang, these in chosen.items():
            check_steps(lang, these)
        return chosen

    @property
    def truecased(self) -> list[str]:
        """The languages whose truecaser a run trains (``truecase`` among their steps)."""
        return [lang for lang, steps in self.tokenize.items() if "truecase" in steps]

    @property
    def detokenize(self) -> dict | None:
        """The target's steps for decode_test to undo (``{"lang", "steps"}``), or None."""
        tgt = self.lang_pair[1]
        return {"lang": tgt, "steps": self.tokenize[tgt]} if tgt in self.tokenize else None

    def pretokenize(self) -> dict | None:
        """What a trainer of pre-tokenized text records in its checkpoints (the steps, its
        truecasers: translate applies them), or None: absent from the default run's
        ``--config-json``, so adding it reran no job."""
        if not self.tokenize:
            return None
        return {"langs": list(self.lang_pair), "tokenize": self.tokenize,
                "truecasers": {lang: self.results.train_truecaser(lang).model
                               for lang in self.truecased}}

    def text_docs(self, corpus: str) -> str:
        """The documents BPE, parsing and the shards read: tokenized where ``tokenize`` sets
        steps, else as ingested. WHY not for scoring: references stay as released."""
        return (self.results.tokenize_corpus(corpus).docs if self.tokenize
                else self.results.ingest_corpus(corpus).docs)

    @property
    def test_corpora(self) -> list[str]:
        """Corpora decoded and scored on ``score.test_splits`` (training-only corpora have none)."""
        return list(self.config["score"]["corpora"] or self.corpora)

    @property
    def test_splits(self) -> list[str]:
        return list(self.config["score"]["test_splits"])

    @property
    def head_corpora(self) -> list[str]:
        """Corpora whose parses some job trains on (``data: heads``: the DBSA supervision); only
        these are parsed, and a setup without such a job runs no stanza at all."""
        return list(dict.fromkeys(c for j in self.jobs.values() if j.data == HEADS
                                  for c in (j.corpus, j.dev_corpus)))

    @property
    def parses(self) -> bool:
        return bool(self.head_corpora)

    def shard_root(self, corpus: str, data: str) -> str:
        """The shard folder a job with ``data`` reads (a rule's output, hence its input)."""
        return (self.results.make_head_shards(corpus) if data == HEADS
                else self.results.make_shards(corpus))

    def shard_task(self, data: str) -> str:
        """The task folder inside :meth:`shard_root`: head shards hold sentence pairs."""
        return "sent" if data == HEADS else data

    # --- parsing -------------------------------------------------------------------------
    def treebank_digest(self, lang: str) -> str:
        """sha256 of the UD treebank files that would train language ``lang``'s stanza model,
        where the shared folder (:func:`pipeline_lib.layout.shared_dir`) holds them ("" where it
        does not: then the pinned commit in the config names them). Rule stanza_models passes
        the configured folder, not its resolved place, and reruns when this content changes:
        a moved checkout retrains nothing."""
        import hashlib

        tb = self.config["stanza"]["treebanks"].get(lang)
        h = hashlib.sha256()
        folder = shared_dir(self.config["shared_dir"]) / "ud"
        files = sorted((folder / tb["name"]).glob("*.conllu")) if tb else []
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        return h.hexdigest()[:16] if files else ""

    def side_lang(self, side: str) -> str:
        return self.config["src_lang" if side == "src" else "tgt_lang"]

    def parse_shards(self, corpus: str, side: str) -> list[Files]:
        return [self.results.parse_shard(corpus, side, str(n))
                for n in range(self.config["parse"]["shards"])]

    def parse_shard_dirs(self, corpus: str, side: str) -> list[str]:
        """The folders of a corpus side's parse shards (what the merge step reads)."""
        return [str(Path(shard.manifest).parent) for shard in self.parse_shards(corpus, side)]

    def parse_shard_files(self, corpus: str, side: str) -> list[str]:
        return [f for shard in self.parse_shards(corpus, side) for f in shard.values()]
