"""Does destroying a reliable publisher right after ``publish`` lose the message?

Why it exists: the node destroys its publishers on deactivate right after the worker published
the last frame's state; one CI run lost that state. This probe publishes one message per fresh
publisher and destroys it at once, ``N`` times, with and without ``wait_for_all_acked``, while
two busy loops load the CPU, and prints how many a subscriber in another process received.

    .venv/bin/python scripts/dds_flush_probe.py [N]
"""

import subprocess
import sys
import time

SUB = r'''
import sys, threading, time, rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
rclpy.init()
n = rclpy.create_node('flush_probe_sub')
got = set()
n.create_subscription(String, '/flush_probe', lambda m: got.add(m.data),
                      QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
stop = threading.Event()
def spin():
    while not stop.is_set():
        rclpy.spin_once(n, timeout_sec=0.05)
th = threading.Thread(target=spin)
th.start()
sys.stdin.readline()  # the publisher is done
time.sleep(2.0)
stop.set()
th.join()
print(len(got))
'''


def run(mode: str, n: int) -> int:
    import rclpy
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    sub = subprocess.Popen([sys.executable, '-c', SUB], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(2)]
    rclpy.init()
    node = rclpy.create_node('flush_probe_pub')
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    try:
        for i in range(n):
            pub = node.create_publisher(String, '/flush_probe', qos)
            t0 = time.time()
            while pub.get_subscription_count() == 0 and time.time() - t0 < 10:
                time.sleep(0.01)
            time.sleep(0.05)  # let discovery settle both ways
            pub.publish(String(data=f'{mode}-{i}'))
            if mode == 'flush':
                pub.wait_for_all_acked(Duration(seconds=1))
            node.destroy_publisher(pub)
        out, _ = sub.communicate('done\n', timeout=30)
        return int(out.strip().splitlines()[-1])
    finally:
        for b in busy:
            b.kill()
        node.destroy_node()
        rclpy.shutdown()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    for mode in ('no_flush', 'flush'):
        print(f'{mode}: received {run(mode, n)} of {n}', flush=True)


if __name__ == '__main__':
    main()
