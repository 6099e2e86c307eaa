"""Replay a rosbag2 bag (sqlite3 or MCAP) without rosbag2: images, prompts, /clock.

rosbag2 (``ros2 bag play``) is not installable from PyPI; this player reads bags with the pure
Python ``rosbags`` library and publishes each message's recorded CDR bytes unchanged through
rclpy (``Publisher.publish(bytes)``), so no message is deserialized and re-serialized and custom
types such as ``sam2_ros/msg/Prompt`` need only their generated Python class to be importable.
Messages keep their recorded spacing (divided by ``--rate``) and ``/clock`` follows bag time,
so a node with ``use_sim_time:=true`` sees the recorded time line.

    python -m sam2_ros.ros.replay BAG [--rate 1.0] [--topics T ...] [--wait]
        [--wait-node /sam2_tracker] [--no-clock] [--in-order]
        [--max-ahead 32] [--progress-topic T ...] [--progress-timeout 60]

``--in-order`` makes a replay reproducible across topics: each message is acknowledged by
every subscriber before the next one goes out. Without it, a message on one topic can overtake
an earlier one on another when discovery is still completing on the subscriber's side (the
publisher sees the subscription, the subscription does not see the publisher yet, and a
reliable sample then waits for a retransmission): a prompt recorded before its frame arrives
after it.

``--max-ahead N`` (flow control): the player reads one message at a time, but a node slower
than the bag would hold the rest of it in its image reader (KEEP_ALL with
``process_every_frame``; DDS acknowledges a sample once held: acks bound nothing). The node's
``~/state`` (stamped as its frame) says a frame was taken: at most N go out unanswered; at N
the player pauses (bag time, ``/clock`` stand still) until a state answers the oldest, then
goes on with the recorded spacing (no burst); no answer in ``--progress-timeout`` s stops it
(exit 3). States: ``--progress-topic``, else the ``--wait-node`` node's; neither: no bound.

Waiting for a node or subscribers, the player says after REPORT_AFTER_S what it waits for, then
every REPORT_EVERY_S. Exit status: 0 the bag played; 1 it cannot be replayed (unreadable bag,
message package missing); 2 the node or subscribers waited for are missing after
``--wait-timeout`` (2 too for a usage error); 3 stalled (above). Ctrl-C (SIGINT) or SIGTERM:
the player stops at once, waiting or playing, says how far it got, and exits 0, as an rclpy node
after ExternalShutdownException: ``ros2 launch`` stops a process with SIGINT, then SIGTERM, and
logs any other status as "process has died" (an error), and systemd counts 143 a failure. Both
signals are only noted (no KeyboardInterrupt inside rclpy's calls: a traceback in destroy_node);
a ``BagPlayer`` (sam2_ros/ros/bag_player.py, the playing) of another program stops once its
node's context is shut down (rclpy's SIGTERM handler does that, and the process goes on).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any, List, Optional, Sequence, Tuple

from sam2_ros.ros.bag_player import (MAX_AHEAD, PROGRESS_TIMEOUT_S, STATE_TYPE, BagPlayer,
                                     ReplayStalled, ReplayStopped)

# exit statuses (the module docstring says when); a signal's stop is EXIT_DONE
EXIT_DONE, EXIT_FAILED, EXIT_NOT_READY, EXIT_STALLED = 0, 1, 2, 3
DESCRIPTION = 'Replay a rosbag2 bag (sqlite3 or MCAP) without rosbag2: images, prompts, /clock.'


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog='sam2_ros.ros.replay', description=DESCRIPTION)
    ap.add_argument('bag', help='rosbag2 directory (sqlite3 or mcap storage)')
    ap.add_argument('--rate', type=float, default=1.0, help='playback speed factor')
    ap.add_argument('--topics', nargs='*', default=None, help='only these topics')
    ap.add_argument('--wait', action='store_true',
                    help='wait until every replayed topic has a subscriber before playing')
    ap.add_argument('--wait-node', default='', metavar='NODE',
                    help='wait until NODE (e.g. /sam2_tracker) subscribes to replayed topics '
                         'and each of those has a subscriber; the bag\'s other topics '
                         '(camera_info, tf) are played without waiting')
    ap.add_argument('--wait-topic', action='append', default=[], metavar='TOPIC[:N]',
                    help='also wait for N (default 1) subscribers on TOPIC, e.g. /clock:2 '
                         '(repeatable; replayed topics or /clock)')
    ap.add_argument('--wait-timeout', type=float, default=60.0,
                    help='seconds, for --wait, --wait-node and --wait-topic')
    ap.add_argument('--no-clock', action='store_true', help='do not publish /clock')
    ap.add_argument('--start-delay', type=float, default=0.0,
                    help='seconds between discovery and the first message')
    ap.add_argument('--qos-depth', type=int, default=100, help='publisher history depth')
    ap.add_argument('--in-order', action='store_true',
                    help='publish each message only after every subscriber acknowledged the one '
                         'before (on any topic): the recorded order across topics is kept, '
                         'the recorded spacing only where the subscribers keep up')
    ap.add_argument('--max-ahead', type=int, default=MAX_AHEAD, metavar='N',
                    help='frames out unanswered by the node\'s state before the player pauses '
                         '(0: no flow control)')
    ap.add_argument('--progress-topic', nargs='*', default=None, metavar='TOPIC',
                    help='TrackingState topics (default: the --wait-node node\'s)')
    ap.add_argument('--progress-timeout', type=float, default=PROGRESS_TIMEOUT_S,
                    help='seconds paused without an answer before the replay stops (exit 3)')
    args = ap.parse_args(list(argv))
    if args.rate <= 0:
        ap.error('--rate must be > 0')
    if args.max_ahead < 0 or args.progress_timeout <= 0:
        ap.error('--max-ahead must be >= 0 and --progress-timeout > 0')
    return args


def parse_wait_topic(text: str) -> Tuple[str, int]:
    """'/clock:2' -> ('/clock', 2); '/clock' -> ('/clock', 1)."""
    head, sep, tail = text.rpartition(':')
    if sep and tail.isdigit():
        return head, int(tail)
    return text, 1


class Signals:
    """SIGINT and SIGTERM noted, never raised (main's handlers): each wait of the player asks
    :meth:`requested` between its steps (0.1 s at most)."""

    def __init__(self) -> None:
        self.received: Optional[str] = None

    def note(self, signum: int, frame: Any) -> None:
        self.received = self.received or signal.Signals(signum).name

    def requested(self) -> bool:
        return self.received is not None


def main(argv: Optional[List[str]] = None) -> int:
    """The player's command line (``argv``: sys.argv's form); the exit status."""
    signals = Signals()     # before rclpy's import (a second): a Ctrl-C in it is noted too
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signals.note)
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions
    from rclpy.utilities import remove_ros_args

    argv = list(sys.argv if argv is None else argv)
    args = parse_args(remove_ros_args(argv)[1:])
    # rclpy's handlers off: they shut the context down (rclpy's SIGTERM handler; logging to
    # /rosout then fails) or raise KeyboardInterrupt anywhere (Python's SIGINT handler)
    rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node('sam2_bag_replay')
    log = node.get_logger()
    player = None
    try:
        player = BagPlayer(node, args.bag, rate=args.rate, topics=args.topics,
                           clock=not args.no_clock, qos_depth=args.qos_depth,
                           in_order=args.in_order, stop=signals.requested)
        return play(player, args, log)
    except ReplayStalled as exc:
        log.error(str(exc))
        return EXIT_STALLED
    except (ReplayStopped, ExternalShutdownException) as exc:
        return stopped(log, signals, player, str(exc) or 'stopped')
    except Exception as exc:  # unreadable bag, unknown message package, bad topic name...
        if signals.requested():     # a call the signal cut short: the stop, not an error
            return stopped(log, signals, player, 'stopped')
        log.error(f'cannot replay {args.bag}: {type(exc).__name__}: {exc}')
        return EXIT_FAILED
    finally:
        if player is not None:
            player.close()
        node.destroy_node()
        rclpy.try_shutdown()


def play(player: BagPlayer, args: Any, log: Any) -> int:
    """Wait for the node and subscribers ``args`` names, play the bag; the exit status."""
    extra = dict(parse_wait_topic(w) for w in args.wait_topic)
    why = player.wait_for_node(args.wait_node, args.wait_timeout) if args.wait_node else ''
    if why:
        log.error(f'after {args.wait_timeout:.0f} s: {why}')
        return EXIT_NOT_READY
    if args.wait or extra:
        short = player.wait_for_subscribers(args.wait_timeout, args.wait, extra)
        if short:
            log.error(f'too few subscribers after {args.wait_timeout:.0f} s on {short}')
            return EXIT_NOT_READY
    if args.max_ahead:
        topics = args.progress_topic if args.progress_topic is not None else (
            player.state_topics(args.wait_node) if args.wait_node else [])
        if topics:
            player.follow(topics, args.max_ahead, args.progress_timeout)
        elif args.wait_node:
            log.warning(f'{args.wait_node} publishes no {STATE_TYPE}: no flow control '
                        f'(--progress-topic names the node\'s state topic)')
    player.delay(args.start_delay)
    seconds = player.play()
    acked = player.wait_acked()
    paused = f'; {player.held} frames waited for the node ({player.paused_s:.1f} s)'
    log.info(f'bag finished: replayed {sum(player.counts.values())} messages in {seconds:.2f} s '
             f'({", ".join(f"{t}: {n}" for t, n in player.counts.items())})'
             f'{"" if acked else "; some were not acknowledged by all subscribers"}'
             f'{f"; {player.unacked} not acknowledged in order" if player.unacked else ""}'
             f'{paused if player.held else ""}')
    return EXIT_DONE


def stopped(log: Any, signals: Signals, player: Optional[BagPlayer], what: str) -> int:
    """The player stopped by a signal: one line saying how far it got; exit 0 (docstring)."""
    done = sum(player.counts.values()) if player is not None else 0
    log.info(f'{what} by {signals.received or "a shutdown"}: {done} messages replayed')
    return EXIT_DONE


if __name__ == '__main__':
    sys.exit(main())
