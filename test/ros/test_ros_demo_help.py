"""The demo's help and its random-weights box name the command the README runs
(`sam2-ros-demo`, not `python -m sam2_ros.ros.demo`), and every option says what it is."""

from __future__ import annotations

import re

import pytest

from sam2_ros.ros import demo


def test_help_names_the_console_script_and_describes_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        demo.parse_args(['--help'])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith('usage: sam2-ros-demo ')
    assert 'sam2_ros.ros.demo' not in out
    # each option's entry: its signature, then its help text (argparse prints none without)
    entries = re.split(r'\n(?=  -)', out.split('options:\n', 1)[1])
    helps = {e.split()[0].rstrip(','): re.sub(r'^\s*-[^ ]*(, -[^ ]*)?( [A-Z_]+| \{[^}]*\})?',
                                                '', e).strip() for e in entries}
    assert set(helps) >= {'--frames', '--width', '--height', '--checkpoint', '--timeout'}
    assert all(helps.values()), helps
    assert re.search(r'--frames FRAMES\s+camera frames to send', out), out


def test_random_weights_box_suggests_the_readmes_command():
    assert 'sam2-ros-demo --checkpoint sam2.1_hiera_tiny.pt' in demo.RANDOM_WARNING
    assert 'python -m' not in demo.RANDOM_WARNING
    assert {len(line) for line in demo.RANDOM_WARNING.strip().splitlines()} == {78}
