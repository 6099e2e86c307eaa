"""The node end to end with a compressed camera on the CPU: JPEG CompressedImages in, the
FrameDecoder on the host (a CPU tracker: GPU decode off, and diagnostics say why), the masks
equal to an in-process tracker's on the same host-decoded frames, ~/mask/compressed (PNG)
equal to ~/mask, ~/overlay/compressed the JPEG of ~/overlay, and a truncated JPEG skipped
with its error while tracking goes on. The node in a subprocess, a client here
(test_ros_node.py shows the pattern)."""

import cv2
import numpy as np
import pytest

from ros_helpers import (COMPRESSED_TOPIC, Client, compressed_msg, frames, mask_array,
                         prompt_msg, require_messages, stamp, stamp_of, start_node, wait_until)
from test_ros_node import in_process_tracker

from sam2_ros.engine.types import Prompt
from sam2_ros.ros import images

pytestmark = pytest.mark.slow
WARMUP = 30          # frames sent at most until the node sends to the compressed topics too


class CompressedClient(Client):
    """The tests' client, also subscribed to ~/mask/compressed and ~/overlay/compressed."""

    def add_entities(self) -> None:
        super().add_entities()
        from sensor_msgs.msg import CompressedImage

        self.mask_png, self.overlay_jpeg = [], []
        for topic, store in (('/sam2_tracker/mask/compressed', self.mask_png),
                             ('/sam2_tracker/overlay/compressed', self.overlay_jpeg)):
            self.node.create_subscription(CompressedImage, topic, self.appender(store), self.qos)


def by_stamp(msgs):
    return {stamp_of(m.header): m for m in msgs}


def png_array(msg):
    return cv2.imdecode(np.frombuffer(bytes(msg.data), np.uint8), cv2.IMREAD_UNCHANGED)


def diag_values(c):
    return [{kv.key: kv.value for kv in d.status[0].values} for d in c.snapshot(c.diags)]


def test_jpeg_camera_end_to_end_on_the_cpu(tmp_path, lease):
    require_messages()
    proc = start_node(lease, tmp_path, 'jpeg', input_type='compressed',
                      image_topic=COMPRESSED_TOPIC, max_objects=2, publish_overlay=True)
    c = None
    try:
        proc.wait_log(r'\]: active:', 90)
        assert 'compressed input decoded on the host (GPU decode off: device cpu is not ' \
            'CUDA)' in proc.log()
        c = CompressedClient(lease)
        c.wait_connected(30, compressed=True)
        fr = frames(WARMUP + 6, seed=5)
        sent = []                                    # (stamp, message) in publishing order
        # warm-up frames, no objects: until the node sends this frame's compressed mask and
        # overlay too (it sends to a topic only once it sees our subscription)
        for k in range(WARMUP):
            m = compressed_msg(fr[k], stamp(k), 'jpg')
            c.pub_compressed.publish(m)
            sent.append((stamp(k), m))
            c.wait_state(stamp(k), 60)
            if all(stamp(k) in by_stamp(c.snapshot(x)) for x in (c.mask_png, c.overlay_jpeg)):
                break
        else:
            pytest.fail('the node never sent to ~/mask/compressed and ~/overlay/compressed')
        base = k + 1
        c.send_prompts(prompt_msg(1, stamp(base), box=(10, 20, 50, 60)))
        for i in range(base, base + 3):
            m = compressed_msg(fr[i], stamp(i), 'jpg')
            c.pub_compressed.publish(m)
            sent.append((stamp(i), m))
        bad = compressed_msg(fr[base + 3], stamp(base + 3), 'jpg')
        bad.data = bytes(bad.data)[:len(bad.data) // 2]           # truncated: skipped
        c.pub_compressed.publish(bad)
        last = compressed_msg(fr[base + 4], stamp(base + 4), 'jpg')
        c.pub_compressed.publish(last)
        sent.append((stamp(base + 4), last))
        c.wait_state(stamp(base + 4), 60)
        wait_until(lambda: all(stamp(base + 4) in by_stamp(c.snapshot(x))
                               for x in (c.masks, c.mask_png, c.overlays, c.overlay_jpeg)),
                   30, 'the last frame on every output')
        n_sent = len(sent)
        wait_until(lambda: any(int(v.get('decoded_on_host', 0)) >= n_sent
                               for v in diag_values(c)), 30, 'diagnostics: frames decoded')
        states, masks = by_stamp(c.snapshot(c.states)), by_stamp(c.snapshot(c.masks))
        pngs, overlays = by_stamp(c.snapshot(c.mask_png)), by_stamp(c.snapshot(c.overlay_jpeg))
        raw_overlays = by_stamp(c.snapshot(c.overlays))
        values = diag_values(c)[-1]
    finally:
        if c is not None:
            c.close()
        proc.stop()

    assert stamp(base + 3) not in states                       # the truncated frame
    assert any('truncated' in e for e in states[stamp(base + 4)].errors), \
        list(states[stamp(base + 4)].errors)
    assert values['gpu_decode'] == 'off: device cpu is not CUDA'
    assert int(values['decoded_on_gpu']) == 0 and int(values['gpu_decode_failures']) == 0
    # the same frames decoded on the host and tracked in process: the same masks
    tr = in_process_tracker()
    for ns, m in sent:
        if ns == stamp(base):
            tr.queue_prompt(Prompt(1, box=(10, 20, 50, 60)))
        ref = tr.track(images.compressed_to_rgb(m))
        np.testing.assert_array_equal(mask_array(masks[ns]), ref.label_mask(), err_msg=str(ns))
    assert mask_array(masks[stamp(base + 4)]).any()             # the object is there
    for ns in (stamp(base), stamp(base + 4)):
        assert 'png' in pngs[ns].format and pngs[ns].header.frame_id == masks[ns].header.frame_id
        np.testing.assert_array_equal(png_array(pngs[ns]), mask_array(masks[ns]))
        raw = raw_overlays[ns]
        rgb = np.frombuffer(bytes(raw.data), np.uint8).reshape(raw.height, raw.width, 3)
        ok, want = cv2.imencode('.jpg', np.ascontiguousarray(rgb[..., ::-1]),
                                [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert overlays[ns].format == 'rgb8; jpeg compressed bgr8'
        assert bytes(overlays[ns].data) == want.tobytes()      # the JPEG of the raw overlay
