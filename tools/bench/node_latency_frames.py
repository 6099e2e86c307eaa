"""Per-frame rows of the node latency benchmark, from the three clocks' records: the camera
process's publish times, the node's timing log (``sam2_ros/ros/timing_log.py``: receipt,
decode, engine, mask sent) and the receiving process's receipt times, all CLOCK_MONOTONIC on
one host. Pure functions (no ROS), so the arithmetic is tested on its own.

The split of image published -> mask received (``SPLIT``, in order; the parts add up to
``e2e_mask_ms`` exactly, each a difference of consecutive marks):

* ``dds_in_ms``        camera publish() called -> the node's image callback: serialization,
  DDS, rclpy taking and converting the message, the executor's dispatch
* ``queue_ms``         callback -> the worker takes the frame (mailbox hand-off)
* ``node_decode_ms``   message -> frame (Image/CompressedImage decode)
* ``prompts_ms``       prompts due on this frame handed to the tracker
* ``node_engine_ms``   ``tracker.track()`` as the worker times it (the state's ``engine_ms``
  is the tracker's own); one node for several cameras: the group's one track call, the same
  span for every camera of it (another camera's decode is in ``prompts_ms``, the hand-off of
  the cameras finished before it in ``handoff_out_ms``)
* ``handoff_out_ms``   track() returned -> the publisher starts on the frame (output stage)
* ``publish_mask_ms``  label mask and message built, publish() called and returned
* ``dds_out_ms``       publish() returned -> the mask callback here (can be slightly negative:
  a reader may get the sample before the writer's publish() has returned)

plus ``handoff_ms`` (queue + prompts + handoff_out: the node's hand-offs),
``mask_publish_call_ms`` (the publish() call alone, inside ``publish_mask_ms``) and the two
parts of ``handoff_out_ms``: ``finish_ms`` (track() returned -> the worker hands the result to
the output stage: its bookkeeping, and with several cameras the cameras finished before this
one) and ``wake_ms`` (handed -> the publisher starts on it: the thread's wake-up, and its wait
for Python's GIL); None for node times without the hand-over mark (before it was logged).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

SPLIT = ('dds_in_ms', 'queue_ms', 'node_decode_ms', 'prompts_ms', 'node_engine_ms',
         'handoff_out_ms', 'publish_mask_ms', 'dds_out_ms')
# the node's marks between the camera's publish and the receipt here, in SPLIT's order
MARKS = ('recv', 'decode0', 'decode1', 'engine0', 'engine1', 'out0', 'mask1')
EXTRA = ('handoff_ms', 'mask_publish_call_ms', 'finish_ms', 'wake_ms')


def split(t_pub: float, node: Optional[Dict[str, float]],
          t_mask: Optional[float]) -> Dict[str, Optional[float]]:
    """The parts of one frame's image -> mask, in ms; all None without the node's times or
    the mask's receipt (or when the node did not publish a mask: no subscriber)."""
    if node is None or t_mask is None or not node.get('mask1'):
        return dict.fromkeys(SPLIT + EXTRA)
    marks = [t_pub] + [node[k] for k in MARKS] + [t_mask]
    out: Dict[str, Optional[float]] = {
        k: round((b - a) * 1e3, 3) for k, a, b in zip(SPLIT, marks, marks[1:])}
    out['handoff_ms'] = round(out['queue_ms'] + out['prompts_ms'] + out['handoff_out_ms'], 3)
    out['mask_publish_call_ms'] = round((node['mask1'] - node['mask0']) * 1e3, 3)
    handed = node.get('handed')
    out['finish_ms'] = round((handed - node['engine1']) * 1e3, 3) if handed else None
    out['wake_ms'] = round((node['out0'] - handed) * 1e3, 3) if handed else None
    return out


def frame_rows(sent: List[Dict[str, Any]], frames: int, warmup: int,
               mask_t: Dict[int, float], state_t: Dict[int, float],
               states: Dict[int, Any],
               node_times: Dict[int, Dict[str, float]]) -> List[Dict[str, Any]]:
    """Per-frame rows of one camera: ``sent`` (the camera's records, one extra frame at the
    end, left out), receipt times and states here by stamp, the node's times by stamp."""
    rows: List[Dict[str, Any]] = []
    for k, s in enumerate(sent[:frames]):
        ns, nxt = s['stamp_ns'], sent[k + 1]
        st, st_next = states.get(ns), states.get(nxt['stamp_ns'])
        tm, ts = mask_t.get(ns), state_t.get(ns)
        # queued: the previous frame's state had not come back when publish() returned
        prev_t = state_t.get(sent[k - 1]['stamp_ns']) if k else None
        row: Dict[str, Any] = {
            'index': s['index'], 'stamp_ns': ns, 'warmup': s['index'] < warmup,
            'queued': k > 0 and (prev_t is None or prev_t > s['t_ret']),
            'correction': s['correction'],
            'publish_call_ms': round(s['publish_call_ms'], 3),
            # publish() called this long after the frame was due (camera process)
            'camera_late_ms': round(s['late_ms'], 3),
            'image_bytes': s.get('bytes'),
            'e2e_mask_ms': None if tm is None else round((tm - s['t_pub']) * 1e3, 3),
            'e2e_state_ms': None if ts is None else round((ts - s['t_pub']) * 1e3, 3),
            # the mask came after the camera's next image (missing counts as missed)
            'deadline_miss': tm is None or tm > nxt['t_pub'],
            'next_image_ms': round((nxt['t_pub'] - s['t_pub']) * 1e3, 3),
            'decode_ms': None if st is None else round(float(st.decode_ms), 3),
            'engine_ms': None if st is None else round(float(st.engine_ms), 3),
            'publish_ms': None if st_next is None else round(float(st_next.publish_ms), 3),
            'objects': None if st is None else len(st.objects),
            'engine_mode': None if st is None else st.engine_mode,
            'errors': [] if st is None else list(st.errors),
        }
        parts = [row['decode_ms'], row['engine_ms'], row['publish_ms']]
        row['node_ms'] = None if None in parts else round(sum(parts), 3)
        row['transport_ms'] = (None if None in parts[:2] or row['e2e_mask_ms'] is None
                               else round(row['e2e_mask_ms'] - sum(parts[:2]), 3))
        row.update(split(s['t_pub'], node_times.get(ns), tm))
        rows.append(row)
    return rows
