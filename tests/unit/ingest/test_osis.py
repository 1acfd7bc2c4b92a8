"""OSIS cleaning on raw verses copied from the installed SWORD modules (engWEB2015eb, spaRV1909eb)."""

from __future__ import annotations

import pytest

from pipeline_lib.ingest.osis import clean_osis, normalise_chapter_opening, usual_casing

# WEB Genesis 1:1: a footnote between two <w> wrappers with no whitespace around it.
WEB_GEN_1_1 = (
    '<w lemma="strong:H0430">In</w> <w lemma="strong:H0853">the</w> <w lemma="strong:H7225">beginning'
    '</w>, <w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">1:1 '
    '</reference>The Hebrew word rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note><w lemma="strong:H1254">'
    'created</w> <w lemma="strong:H0853">the</w> <w lemma="strong:H8064">heavens</w> <w lemma="strong:'
    'H0430">and</w> <w lemma="strong:H0853">the</w> <w lemma="strong:H0776">earth</w>. '
)
# WEB John 3:16 (shortened): "only born</q><note>…</note><q><w>Son".
WEB_JOHN_3_16 = (
    '<q marker="" who="Jesus"><w lemma="strong:G1063">For</w> <w lemma="strong:G2316">God</w> '
    '<w lemma="strong:G3439">only</w> born</q><note placement="foot"><reference type="annotateRef">'
    '3:16 </reference>The phrase “only born” is from the Greek word “μονογενη”, which is sometimes '
    'translated “only begotten” or “one and only”.</note><q marker="" who="Jesus"><w lemma="strong:'
    'G5207">Son</w>, <w lemma="strong:G2443">that</w> <w lemma="strong:G2222">life</w>. </q>'
)
# WEB Psalm 3:1 (shortened): canonical psalm title, line-group milestones.
WEB_PS_3_1 = (
    '<div type="x-milestone" subType="x-preverse" sID="pv4877"/><title canonical="true" type="psalm">'
    'A Psalm by David, when he fled from Absalom his son.</title> <lg sID="gen7860"/> <l level="1" '
    'sID="gen7861"/><div type="x-milestone" subType="x-preverse" eID="pv4877"/>Yahweh, how <w lemma='
    '"strong:H1732">my</w> adversaries <w lemma="strong:H1121">have</w> increased!<l eID="gen7861" '
    'level="1"/> <l level="2" sID="gen7862"/>Many <w lemma="strong:H1121">are</w> rise <w lemma='
    '"strong:H6440">against</w> <w lemma="strong:H6440">me</w>. <l eID="gen7862" level="2"/>'
)
# WEB Job 41:1: a note between a word and the following word, then a comma-terminated line.
WEB_JOB_41_1 = (
    '“<w lemma="strong:H4758">Can</w> <w lemma="strong:H1571">you</w> draw <w lemma="strong:H2904">'
    'out</w> Leviathan<note placement="foot"><reference type="annotateRef">41:1 </reference>Leviathan '
    'is a name for a crocodile or similar creature.</note> <w lemma="strong:H1571">with</w> '
    '<w lemma="strong:H1571">a</w> fish hook,<l eID="gen7730" level="1"/> <l level="2" sID="gen7731"/>'
    '<w lemma="strong:H0408">or</w> press down <w lemma="strong:H1571">his</w> tongue <w lemma='
    '"strong:H1571">with</w> <w lemma="strong:H1571">a</w> cord? <l eID="gen7731" level="2"/>'
)
# WEB Song 1:2 (shortened): a speaker label that RV1909 does not have.
WEB_SONG_1_2 = (
    '<div type="x-milestone" subType="x-preverse" sID="pv8242"/><speaker>Beloved</speaker> <lg sID='
    '"gen15617"/> <l level="1" sID="gen15618"/><div type="x-milestone" subType="x-preverse" eID="pv8242"'
    '/>Let <w lemma="strong:H3588">him</w> kiss <w lemma="strong:H3588">me</w>;<l eID="gen15618" '
    'level="1"/>'
)
# WEB Luke 17:36: only a footnote (the verse is omitted from the text).
WEB_LUKE_17_36 = (
    '<note placement="foot"><reference type="annotateRef">17:36 </reference>Some Greek manuscripts '
    'add: “Two will be in the field: the one taken, and the other left.”</note><div eID="gen33008" '
    'type="x-p"/>'
)
# RV1909 Genesis 1:1 and Numbers 13:1 (capitalised chapter openings), Genesis 1:9 (transChange).
RV_GEN_1_1 = (
    '<w lemma="strong:H7225">EN el principio</w> <w lemma="strong:H1254">crió</w> <w lemma="strong:'
    'H0430">Dios</w> <w lemma="strong:H8064">los cielos</w> <w lemma="strong:H0776">y la tierra</w>. '
)
RV_NUM_13_1 = (
    '<w lemma="strong:H0310">Y DESPUÉS</w> <w lemma="strong:H5265">movió</w> <w lemma="strong:H5971">'
    'el pueblo</w> <w lemma="strong:H2698">de Haseroth</w>. '
)
RV_GEN_1_9 = (
    '<w lemma="strong:H0559">Y dijo</w> <w lemma="strong:H0430">Dios</w>: <w lemma="strong:H6960">'
    'Júntense</w> <w lemma="strong:H4325">las aguas</w> que <transChange type="added">están'
    '</transChange> <w lemma="strong:H8478">debajo</w>. '
)


@pytest.mark.parametrize(
    "markup, expected",
    [
        (WEB_GEN_1_1, "In the beginning, God created the heavens and the earth."),
        (WEB_JOHN_3_16, "For God only born Son, that life."),
        (WEB_PS_3_1, "A Psalm by David, when he fled from Absalom his son. Yahweh, how my adversaries "
                     "have increased! Many are rise against me."),
        (WEB_JOB_41_1, "“Can you draw out Leviathan with a fish hook, or press down his tongue with a cord?"),
        (WEB_SONG_1_2, "Let him kiss me;"),
        (WEB_LUKE_17_36, ""),
        (RV_GEN_1_1, "EN el principio crió Dios los cielos y la tierra."),
        (RV_GEN_1_9, "Y dijo Dios: Júntense las aguas que están debajo."),
    ],
)
def test_clean_osis_real_verses(markup, expected):
    assert clean_osis(markup) == expected


def test_plain_strongs_numbers_and_entities_are_removed():
    # diatheke-style plain output keeps Strong's numbers as pseudo-tags.
    assert clean_osis("In<H07225> the beginning<H07225> God<H0430> &amp; <G3588>the") == \
        "In the beginning God & the"


def test_headings_and_text_after_chapter_end_are_dropped():
    markup = ('<title type="x-heading">Section heading</title>Grace be with you. Amen. '
              '<chapter eID="Rev.22"/><div sID="g" type="glossary"/> Glossary text.')
    assert clean_osis(markup) == "Grace be with you. Amen."


@pytest.mark.parametrize(
    "text, expected, changed",
    [
        ("EN el principio crió Dios", "En el principio crió Dios", True),
        ("Y DESPUÉS movió el pueblo", "Y Después movió el pueblo", True),  # no casing known
        ("JEHOVÁ es mi pastor", "Jehová es mi pastor", True),
        ("Y Jehová habló á Moisés", "Y Jehová habló á Moisés", False),
        ("", "", False),
    ],
)
def test_normalise_chapter_opening(text, expected, changed):
    assert normalise_chapter_opening(text) == (expected, changed)


def test_chapter_opening_takes_usual_casing_after_another_word():
    casing = usual_casing(["después de esto", "Después dijo", "después", "y Jehová", "JEHOVÁ"])
    assert casing["después"] == "después" and casing["jehová"] == "Jehová"
    assert normalise_chapter_opening(clean_osis(RV_NUM_13_1), casing)[0] == \
        "Y después movió el pueblo de Haseroth."
    assert normalise_chapter_opening("Y JEHOVÁ dijo", casing) == ("Y Jehová dijo", True)
    # at the start, capitalised regardless of the usual spelling
    assert normalise_chapter_opening("DESPUÉS de esto", casing) == ("Después de esto", True)
