"""`vla-bridge param set` reads a value as `ros2 param set` does (YAML), made to fit the type the
node declared where that loses nothing; the command lines parse as documented."""

from __future__ import annotations

import pytest

from ros_bridge.cli import build_parser
from ros_bridge.graph_cli import parse_value

BOOL, INTEGER, DOUBLE, STRING, DOUBLE_ARRAY, STRING_ARRAY = 1, 2, 3, 4, 8, 9


@pytest.mark.parametrize(
    ("text", "declared", "expected"),
    [
        ("80", DOUBLE, 80.0),  # ros2 param set would send an integer and be refused
        ("80", INTEGER, 80),
        ("80.5", DOUBLE, 80.5),
        ("true", BOOL, True),
        ("123", STRING, "123"),  # a string parameter takes the text as it is
        ("hold", STRING, "hold"),
        ("[1, 2.5]", DOUBLE_ARRAY, [1.0, 2.5]),
        ("[/cam/a, /cam/b]", STRING_ARRAY, ["/cam/a", "/cam/b"]),
        ("{unclosed", None, "{unclosed"),  # not YAML: the text
        ("", None, ""),
        ("true", None, True),  # an undeclared parameter: YAML's own type
    ],
)
def test_values_are_read_as_ros2_param_reads_them(
    text: str, declared: int | None, expected: object
) -> None:
    value = parse_value(text, declared)
    assert value == expected and type(value) is type(expected)


def test_node_and_param_command_lines() -> None:
    parser = build_parser()
    ns = parser.parse_args(["param", "set", "/vla_bridge", "deadline_ms", "80"])
    assert (ns.command, ns.verb, ns.node, ns.name, ns.value, ns.timeout) == (
        "param",
        "set",
        "/vla_bridge",
        "deadline_ms",
        "80",
        5.0,
    )
    ns = parser.parse_args(["node", "list", "--all", "--timeout", "2"])
    assert (ns.command, ns.verb, ns.all, ns.timeout) == ("node", "list", True, 2.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["param", "get", "/vla_bridge"])  # no parameter name
