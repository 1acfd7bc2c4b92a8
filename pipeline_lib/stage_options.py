"""A stage's settings as one JSON object: how every rule hands a stage CLI its config.

Each stage CLI keeps its flags for a person at the shell; a rule passes ``--options JSON``
instead, an object whose keys are the CLI's option names (``max_line_chars`` for
``--max-line-chars``), built by the plan (:mod:`pipeline_lib.plan.options`) from the validated
config, plus its input and output paths as flags. Flags given beside ``--options`` win.

WHY one form: three ways to hand over settings (one JSON, two JSONs, ten flags spelled in a rule)
meant every new setting touched the rule file; now a setting goes from the schema to the plan's
options and the CLI, and the rule file stays as it is. The keys are checked against the CLI's own
options, with the same types and choices as the flags, so an option the plan sends that the stage
does not know fails at once, naming it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

FLAG = "--options"


def json_value(text: str) -> Any:
    """argparse ``type`` of a flag that takes a JSON value (a corpus entry, a config section):
    the flag gives text, ``--options`` the value itself (argparse converts only string defaults)."""
    return json.loads(text)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
               ) -> argparse.Namespace:
    """``parser.parse_args(argv)`` after applying ``--options`` (module docstring) to the parser,
    or to the sub-command's parser that ``argv`` names."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    for p in _parsers(parser):
        if FLAG in p._option_string_actions:   # parsed before (tests call main twice)
            continue
        p.add_argument(FLAG, metavar="JSON", help="this stage's settings as one JSON object "
                       "(keys: the option names, e.g. max_len for --max-len); flags win")
    text = _options_text(argv[:argv.index("--")] if "--" in argv else argv)
    if text is not None:
        try:
            options = json.loads(text)
        except json.JSONDecodeError as e:
            parser.error(f"{FLAG} is not JSON: {e}")
        if not isinstance(options, dict):
            parser.error(f"{FLAG} must be a JSON object, not {type(options).__name__}")
        _apply(_chosen(parser, argv), options)
    return parser.parse_args(argv)


def _options_text(argv: list[str]) -> str | None:
    """The value of ``--options JSON`` (or ``--options=JSON``) in ``argv``, else None."""
    for i, arg in enumerate(argv):
        if arg == FLAG and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(FLAG + "="):
            return arg[len(FLAG) + 1:]
    return None


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and its sub-commands' parsers (each accepts ``--options``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [parser, *(p for s in subs for p in dict.fromkeys(s.choices.values()))]


def _chosen(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The sub-command's parser named in ``argv`` (the parser itself when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = next((a for a in argv if a in action.choices), None)
            if name is None:
                parser.error(f"{FLAG} needs a sub-command: {', '.join(action.choices)}")
            return action.choices[name]
    return parser


def _apply(parser: argparse.ArgumentParser, options: dict[str, Any]) -> None:
    """Each option becomes its flag's default (so the flag still wins), checked like the flag."""
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    for key, value in options.items():
        action = actions.get(key)
        if action is None or key == "options":
            parser.error(f"{FLAG}: {key!r} is not an option of {parser.prog} "
                         f"(known: {', '.join(sorted(k for k in actions if k != 'options'))})")
        many = isinstance(value, list) and (action.nargs not in (None, "?")
                                            or isinstance(action, argparse._AppendAction))
        items = value if many else [value]
        if action.type not in (None, json_value):
            try:
                items = [action.type(v) if isinstance(v, str) else v for v in items]
            except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
                parser.error(f"{FLAG}: {key}: {e}")
        if action.choices is not None and any(v not in action.choices for v in items):
            parser.error(f"{FLAG}: {key}: {value!r} is not one of {sorted(action.choices)}")
        action.required = False
        action.default = items if many else items[0]
