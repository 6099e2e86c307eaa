"""The prompt graphs' own copy of a frame's features, and the stream their deferred steps run on.

Why: a prompt (a correction click) runs on the latest tracked frame, whose features live in the
encoder graph's static outputs until the next encode overwrites them. A prompt deferred to the
next ``track`` (``defer_prompt``) would have to run before that frame's encode, with the GPU
idle while the host prepares it. Instead the prompt graphs read a copy (``feats``, written by
``keep`` just before the encode is queued), so the deferred steps can be queued after the
encode: the host prepares them while the GPU encodes, and on CUDA they run on a second stream
(``beside``), their kernels beside the encoder's. An immediate prompt copies the current
features first (``current``): one copy per level per prompted frame.

Several cameras: the copy holds every camera's frame, as the encoder's outputs do, and the
encoder's input rows (a camera without a frame in a step replays its last input row, so a
camera whose deferred step failed gets both back: ``restore``).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import torch

from sam2_ros.engine import encoder
from sam2_ros.engine.cuda.capture import CapturedGraph


class KeptFeatures:
    """A copy of the encoder graph's features ([HW_l, N, C_l] per level) for the prompt
    graphs, which of the encoder's replays it holds, and the side stream of deferred steps."""

    def __init__(self, enc: CapturedGraph, cameras: int):
        out: encoder.Features = enc.outputs
        self.enc = enc
        self.feats = encoder.Features([t.clone() for t in out.vision_feats],
                                      [t.clone() for t in out.vision_pos], list(out.feat_sizes))
        # [N, 3, S, S] the encoder's input rows (several cameras: ``restore``)
        self.image: Optional[torch.Tensor] = enc.inputs.clone() if cameras > 1 else None
        self.of: Optional[int] = None      # the encoder replay whose features ``feats`` hold
        self.copies = 0                    # ``keep`` calls (tests, probes)
        self.pos_kept = False              # the positional encodings copied (they never change)
        cuda = out.vision_feats[0].device.type == 'cuda'
        self.side = torch.cuda.Stream(out.vision_feats[0].device) if cuda else None
        self.copied = torch.cuda.Event() if cuda else None     # the last ``keep``'s copies

    def keep(self, replay: int) -> encoder.Features:
        """Copy the encoder's current outputs (those of its replay number ``replay``) into
        ``feats``, queued on the current stream; returns ``feats``."""
        out: encoder.Features = self.enc.outputs
        for dst, src in zip(self.feats.vision_feats, out.vision_feats):
            dst.copy_(src)
        if not self.pos_kept:
            for dst, src in zip(self.feats.vision_pos, out.vision_pos):
                dst.copy_(src)
            self.pos_kept = True
        if self.image is not None:
            self.image.copy_(self.enc.inputs)
        if self.copied is not None:
            self.copied.record()
        self.of = replay
        self.copies += 1
        return self.feats

    def current(self, replay: int) -> encoder.Features:
        """``feats`` holding the encoder's replay ``replay`` (copied unless they already do)."""
        return self.feats if self.of == replay else self.keep(replay)

    @contextlib.contextmanager
    def beside(self) -> Iterator[Callable[[torch.Tensor], None]]:
        """Run the block's CUDA work on the side stream, after the last ``keep``'s copies and
        beside whatever the current stream queued since (the encode); the current stream waits
        for all of it at the end. Yields ``hand_over(t)``: a tensor the block allocated that
        the current stream uses later (its memory is not reused before that use). On the CPU:
        the block as is."""
        if self.side is None:
            yield no_hand_over
            return
        main = torch.cuda.current_stream(self.side.device)
        self.side.wait_event(self.copied)
        try:
            with torch.cuda.stream(self.side):
                yield lambda t: t.record_stream(main)
        finally:
            main.wait_stream(self.side)

    def restore(self, position: int) -> None:
        """Put camera ``position``'s kept frame back into the encoder's outputs (and its input
        row): the encode that followed ``keep`` is undone for that camera."""
        out: encoder.Features = self.enc.outputs
        for dst, src in zip(out.vision_feats, self.feats.vision_feats):
            dst[:, position].copy_(src[:, position])
        if self.image is not None:
            self.enc.inputs[position].copy_(self.image[position])


def no_hand_over(t: torch.Tensor) -> None:
    """``KeptFeatures.beside``'s hand-over with one stream: nothing to do."""
