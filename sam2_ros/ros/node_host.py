"""The node's side of the worker's protocol (:class:`~sam2_ros.ros.worker_types.WorkerHost`):
decoding frames (compressed ones by a :class:`~sam2_ros.engine.decode.FrameDecoder`: JPEG on
the GPU where it can), converting prompts and clicks, reading detections and their run-time rules,
logging, and the worker threads' CUDA device. Runs in the worker thread, the only one touching
the tracker.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Tuple

from sam2_ros.engine.decode import FrameDecoder
from sam2_ros.engine.errors import UnknownObjectError
from sam2_ros.engine.frame_in import Frame
from sam2_ros.engine.types import Prompt
from sam2_ros.ros import click_ids, images, inputs, native_stderr, runtime_params
from sam2_ros.ros import detections as det
from sam2_ros.ros.log_filter import FilteredLog
from sam2_ros.ros.mailbox import PromptItem


class NodeHost:
    """What the worker asks of the node. ``node`` gives the run-time parameters (read per
    message) and sets click_object_id for click_mode 'new'; ``tracker`` and ``cfg`` are those
    configure built; ``bridge`` decodes raw images, ``decoder`` compressed ones (None: the
    input is raw); ``held_ids()`` are the object ids of the add prompts the worker holds for
    future frames."""

    def __init__(self, node: Any, tracker: Any, cfg: Any, opts: Any, bridge: Any,
                 log: FilteredLog, held_ids: Callable[[], Iterable[int]],
                 decoder: Optional[FrameDecoder] = None) -> None:
        self.node, self.tracker, self.cfg, self.opts = node, tracker, cfg, opts
        self.bridge, self._log, self.decoder = bridge, log, decoder
        self.held_ids = held_ids

    def value(self, name: str) -> Any:
        return self.node.get_parameter(name).value

    def log(self, level: str, text: str) -> None:
        """One line of the worker in the node's log; a multi-camera node's names its camera
        (every camera's worker logs to the one node log)."""
        camera = self.camera_name()
        self._log.log(level, f'camera {camera}: {text}' if camera else text)

    def camera_name(self) -> str:
        """The camera this host serves in a multi-camera node, '' with one camera: rig.py
        gives each camera its own host and sets its tracker to that camera's
        (CameraTracker.camera, the index into the ``cameras`` parameter)."""
        names = list(self.opts.cameras) if self.opts is not None else []
        return names[self.tracker.camera] if names and self.tracker is not None else ''

    def thread_init(self) -> None:
        """The current CUDA device is per thread: make the worker's the tracker's device."""
        if str(self.cfg.device).startswith('cuda:'):  # plain 'cuda' is device 0 anyway
            import torch

            torch.cuda.set_device(torch.device(self.cfg.device))

    def decode(self, msg: Any) -> Frame:
        """[H, W, 3] uint8 RGB: numpy on the host, or a CUDA tensor (JPEG by nvJPEG)."""
        if self.decoder is None:
            return images.image_to_rgb(msg, self.bridge)
        return self.decoder.decode(msg.data, msg.format or '')

    def convert(self, item: PromptItem) -> Tuple[int, Optional[Prompt]]:
        """A prompt message, or a click following the run-time parameters click_mode and
        click_object_id."""
        if item.kind != 'click':
            return inputs.prompt_from_msg(item.msg, self.bridge)
        mode = self.value('click_mode')
        obj_id = int(self.value('click_object_id'))
        if mode == 'negative' and obj_id not in click_ids.ids_in_use(self.tracker,
                                                                     self.held_ids()):
            # a lone negative point would start an object of "everything but here"
            raise UnknownObjectError(
                f'click_mode negative: object {obj_id} (click_object_id) is not tracked or '
                f'starting, so there is nothing to remove the clicked area from; set '
                f'click_object_id to a tracked object, or click with click_mode new or '
                f'positive to start one')
        if mode == 'new':
            in_use = click_ids.ids_in_use(self.tracker, self.held_ids())
            obj_id = click_ids.new_object_id(in_use, self.cfg.max_objects)
            from rclpy.parameter import Parameter

            self.node.set_parameters([Parameter('click_object_id', value=obj_id)])
            self.log('info', f'click starts object {obj_id} (click_mode new); it is now '
                             f'click_object_id, so click_mode positive/negative corrects it')
        return inputs.ACTION_ADD, inputs.click_to_prompt(item.msg, obj_id,
                                                         positive=mode != 'negative')

    def convert_detections(self, msg: Any) -> List[det.RawDetection]:
        return inputs.detections_from_msg(msg)

    def detection_rules(self) -> det.Rules:
        return runtime_params.rules(self.value, self.cfg.max_objects)


def frame_decoder(cfg: Any, opts: Any) -> Optional[FrameDecoder]:
    """The decoder of a compressed input (None for raw input): nvJPEG on the tracker's device
    unless ``decode_on_gpu`` is off or it cannot run there (then the host, the reason kept)."""
    if opts.input_type != 'compressed':
        return None
    return FrameDecoder(cfg.device, gpu=bool(opts.decode_on_gpu),
                        max_pixels=int(opts.max_image_pixels),
                        host_capture=native_stderr.captured)
