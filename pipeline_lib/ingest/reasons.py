"""Why ingestion quarantined a record or repaired one (the quarantine ``reason`` column and the
manifest's ``rejected``/``repaired`` keys; docs/inputs.md "Bad input" lists them)."""

from __future__ import annotations

from enum import Enum


class IngestReason(str, Enum):
    """Why a corpus reader quarantined a record (quarantine ``reason`` column, manifest keys)."""

    UNDECODABLE = "undecodable_bytes"
    CONTROL_CHARACTER = "control_character"            # C0 but tab (NUL, ESC, CR...), DEL, C1
    EMPTY = "empty_segment"
    TOO_LONG = "too_long"
    SEG_COUNT_MISMATCH = "segment_count_mismatch"      # the two sides of a document differ in length
    SEG_ID_MISMATCH = "segment_id_mismatch"            # same length, but different <seg id>s
    DUPLICATE_SEG_ID = "duplicate_segment_id"
    DUPLICATE_DOC_ID = "duplicate_doc_id"
    DUPLICATE_DOC_CONTENT = "duplicate_doc_content"    # another file (union part) of the split has it
    MISSING_DOC_ID = "missing_doc_id"
    MISSING_REFERENCE = "missing_reference"            # no target document for this source document
    REFERENCE_WITHOUT_SOURCE = "reference_without_source"
    DOC_NOT_CONTIGUOUS = "doc_id_not_contiguous"       # doc-id file revisits an earlier document
    DOC_TYPE_EXCLUDED = "doc_type_excluded"            # Gigaword non-story documents
    NO_SEGMENTS = "document_without_segments"          # e.g. Gigaword <TEXT> without <P>
    FIELD_COUNT = "field_count"                        # a ` ||| ` line (ASPEC) with the wrong fields
    INVALID_REFERENCE = "invalid_character_reference"  # &#xD800; (a surrogate), &#x110000;
    UNRESOLVED_ENTITY = "unresolved_entity"            # wmt_xml: an external or skipped entity
    MARKUP_IN_SEGMENT = "markup_in_segment"            # a <p> (block tag) inside a closed <seg>


class HygieneReason(str, Enum):
    """Why the hygiene pass of ingestion (pipeline_lib/ingest/hygiene.py) removed a pair from a
    split it filters (quarantine ``reason`` column with stage ``hygiene``, manifest keys)."""

    DUPLICATE_PAIR = "duplicate_pair"                  # the same pair earlier in the split
    DUPLICATE_PAIR_NORMALISED = "duplicate_pair_normalised"  # the same letters and digits
    DUPLICATE_DOCUMENT = "duplicate_document"          # every pair of an earlier document, in order
    COPY = "source_copy"                               # a reference equals the source (normalised)
    LENGTH_RATIO = "length_ratio"                      # longer side > max_length_ratio x shorter
    WRONG_LANGUAGE_SRC = "wrong_language_src"          # src_lang improbable (language id)
    WRONG_LANGUAGE_TGT = "wrong_language_tgt"          # tgt_lang improbable in a reference
    OVERLAP_DEV = "overlap_dev"                        # the pair or document is in dev
    OVERLAP_TEST = "overlap_test"                      # the pair or document is in test


class IngestRepair(str, Enum):
    """What a reader fixed instead of rejecting (manifest ``repaired``), so a fix is counted too."""

    STRAY_BOM = "stray_bom_removed"    # U+FEFF after the start of a file (files concatenated)
    INVISIBLE = "invisible_character_removed"  # zero-width space, word joiner, bidi controls
