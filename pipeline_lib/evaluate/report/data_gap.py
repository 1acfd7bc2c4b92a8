"""The data-subset gap: systems trained alike that differ only in the shards they read (the
document shards against the parsed subset's, say). Their BLEU gap is what the data alone moves.

WHY not called noise: the pair differs in what it trained on (in the default run 10,000 pairs
against all of them, which never see the New Testament epistles half the test set comes from),
so its gap grows with whatever data difference a config holds; it says nothing about how much
a seed or the test sample moves a score (issue 34). That is the decision rule's work (seeds and
the intervals of Δ, pipeline_lib/evaluate/decision.py). The gap is shown beside the verdict so
that a reader sees how much the data subsets alone differ."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline_lib.evaluate.report.document import NA, Table, Text, fmt
from pipeline_lib.evaluate.report.inputs import Inputs, TrainRun
from pipeline_lib.evaluate.report.results import baseline_of, verdict_test_set


@dataclass
class DataPair:
    """Two evaluated systems whose training jobs differ only in their data, with their BLEU on
    the verdict's test set."""

    first: str
    second: str
    bleu: tuple[float, float]
    p: float | None                      # the scores' paired bootstrap of the two, if any
    reads: tuple[list[str], list[str]]   # what each read that the other did not (input paths)

    @property
    def delta(self) -> float:
        """|Δ BLEU|, at the scores' two decimals (a gap of 1.46, not 1.4600000000000009)."""
        return round(abs(self.bleu[0] - self.bleu[1]), 2)


def data_inputs(run: TrainRun | None) -> dict[str, str] | None:
    """What a job read besides its initial checkpoint: its manifest's inputs (path -> sha256 of
    the shards, dev shards, aux shards and SentencePiece model), which name the shards the plan
    gave it (data and corpus) and pin their content. None where not recorded (no manifest, no
    inputs): two such jobs cannot be shown to differ in their data alone."""
    if run is None or run.manifest is None:
        return None
    init = run.train_params.get("init_from")
    read = {path: h for path, h in (run.manifest.get("inputs") or {}).items() if path != init}
    return read or None


def differ_only_in_data(a: TrainRun | None, b: TrainRun | None) -> bool:
    """Whether two jobs trained the same model config with the same train settings (seed,
    updates, stop rule and the initial checkpoint among them) from the same parent job, on
    different data. WHY: their BLEU gap then measures which shards they read (and training's
    nondeterminism), nothing the experiment varies on purpose."""
    da, db = data_inputs(a), data_inputs(b)
    if da is None or db is None or da == db:
        return False
    pa, pb = a.manifest.get("params") or {}, b.manifest.get("params") or {}
    return (a.parent == b.parent and pa.get("model") is not None and pa.get("train") is not None
            and pa.get("model") == pb.get("model") and pa.get("train") == pb.get("train"))


def pair_p(scores: dict, ts: str, a: str, b: str) -> float | None:
    """The paired bootstrap p of ``a`` and ``b`` where score_test ran that test: one is the
    other's matched control or its baseline. score_test tests no other pair, so None (n/a)
    otherwise rather than a number the scores do not hold."""
    rows = scores["results"][ts]["models"]
    for x, y in ((a, b), (b, a)):
        c = rows[x].get("control")
        if c is not None and c.get("system") == y:
            return c.get("bleu_p")
        if baseline_of(scores, x) == y:
            return rows[x].get("bleu_p")
    return None


def _variant(system: str, job: str) -> str:
    """How a system decodes its job: "" for the job's own row, ``_sent`` for ``<job>_sent``; a
    pair decoded differently would differ in more than its data."""
    return system[len(job):] if system.startswith(job) else system


def data_pairs(inputs: Inputs) -> list[DataPair]:
    """Every pair of evaluated systems, decoded alike, whose jobs differ only in their data
    (:func:`differ_only_in_data`), in the scores' order. WHY: the plan gives each model a
    control on the model's own shards, so a model on document shards and one on the parsed
    subset get two controls from the same checkpoint with the same updates that differ in
    nothing else (``transformer_plus150_doc``, ``transformer_plus150_heads``)."""
    scores = inputs.scores
    if not scores:
        return []
    ts = verdict_test_set(scores)
    rows = scores["results"][ts]["models"]
    systems = [s for s in scores["models"] if "bleu" in rows.get(s, {})]
    pairs = []
    for i, a in enumerate(systems):
        for b in systems[i + 1:]:
            ja, jb = inputs.systems.get(a, a), inputs.systems.get(b, b)
            ra, rb = inputs.train.get(ja), inputs.train.get(jb)
            if ja == jb or _variant(a, ja) != _variant(b, jb) or not differ_only_in_data(ra, rb):
                continue
            da, db = data_inputs(ra), data_inputs(rb)
            reads = ([p for p, h in sorted(da.items()) if db.get(p) != h],
                     [p for p, h in sorted(db.items()) if da.get(p) != h])
            pairs.append(DataPair(a, b, (rows[a]["bleu"], rows[b]["bleu"]),
                                   pair_p(scores, ts, a, b), reads))
    return pairs


def largest_gap(pairs: list[DataPair]) -> float | None:
    """The largest |Δ BLEU| of the pairs. None without a pair (no number is made up)."""
    return max((p.delta for p in pairs), default=None)


def data_gap_block(inputs: Inputs) -> Table | Text:
    """The data-subset gap, shown after the verdict: each pair (BLEU each, |Δ|, p) and the
    largest |Δ| in one sentence; one line saying there is none where no pair exists."""
    if not inputs.scores:
        return Text([f"Data-subset gap: {NA} (scores not read)."])
    pairs = data_pairs(inputs)
    if not pairs:
        return Text(["Data-subset gap: none measured: no pair of controls differing only in their "
                     "shards (no two evaluated systems trained alike from the same checkpoint "
                     "on different shards)."])
    ts, gap = verdict_test_set(inputs.scores), largest_gap(pairs)
    t = Table("Data-subset gap", ["Pair", "BLEU each", "Absolute Δ BLEU", "p"],
              [[f"{p.first} vs {p.second}", f"{p.bleu[0]:.2f} / {p.bleu[1]:.2f}",
                f"{p.delta:.2f}", fmt(p.p, 4)] for p in pairs])
    t.notes.append(f"Data-subset gap: {gap:.2f} BLEU on {ts}, the largest difference between "
                   "two systems that differ only in the shards they read: what the data subsets "
                   "alone move, not noise (seeds and the intervals of Δ in the verdict are the "
                   "noise a verdict has to clear).")
    t.notes.append("A pair: two evaluated systems, decoded alike, whose training jobs have the "
                   "same model config, train settings (seed, updates, stop rule, initial "
                   "checkpoint) and parent job, and read different inputs (their manifests' "
                   "inputs besides the initial checkpoint). p: sacreBLEU's paired bootstrap "
                   "where score_test tested the two (one is the other's control or baseline), "
                   f"else {NA}. With several seeds every seed's pair counts.")
    t.notes += [f"{p.first} reads {', '.join(p.reads[0]) or NA}; {p.second} reads "
                f"{', '.join(p.reads[1]) or NA}." for p in pairs]
    return t
