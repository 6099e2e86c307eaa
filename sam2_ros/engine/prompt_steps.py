"""A camera's prompted steps: a click, box or mask on its latest frame, run through the tracker's
runner and written to its memory bank (``add_prompt``, and the deferred and queued prompts
``track`` runs). Imports no ROS."""

from __future__ import annotations

from typing import Any, List, Tuple

from sam2_ros.engine import step
from sam2_ros.engine.prompts import prompt_mask, prompt_points
from sam2_ros.engine.stream import ObjectInfo, Stream
from sam2_ros.engine.types import Prompt


class PromptSteps:
    """The prompted steps of a ``MultiStreamTracker``'s cameras (its runner, bank, config and
    counters, read from it on each call: a test may swap its runner)."""

    def __init__(self, tracker: Any):
        """tracker: the ``MultiStreamTracker`` (not imported here: it imports this module)."""
        self.tracker = tracker

    def run_deferred(self, stream: Stream) -> None:
        """The prompted steps of the stream's deferred prompts on its latest frame, exactly as
        ``add_prompt`` would have run them in that order; their objects' scores there are kept
        for the next result (``Stream.occluded_runs``), read without a sync now."""
        t = self.tracker
        if stream.deferred:
            stream.check_features()
        pending, stream.deferred = list(stream.deferred.values()), {}
        done: List[ObjectInfo] = []
        try:
            for k, p in enumerate(pending):
                try:
                    self.on_latest(stream, p)
                except Exception:
                    # this one is dropped; those deferred after it wait for the next call
                    stream.deferred = {q.obj_id: q for q in pending[k + 1:]}
                    raise
                done.append(stream.objects[p.obj_id])
                t.stats['deferred_prompts'] += 1
        finally:
            if done:
                slots = t.bank.stage([o.slot for o in done])
                stream.prompted.append((done, t.bank.scores.index_select(0, slots)))

    def on_latest(self, stream: Stream, prompt: Prompt) -> str:
        """A validated prompt's step on the stream's latest frame (``add_prompt``)."""
        obj = stream.objects.get(prompt.obj_id)
        # An object prompted only on this very frame has not been tracked yet: sam2 treats
        # another prompt there as initial too (is_init_cond_frame). One a queued prompt
        # started inside track() has been (propagated over that frame): a correction.
        init = obj is None or obj.created_frame == stream.frame and not obj.started_by_track
        return self.step(stream, prompt, init=init)

    def step(self, stream: Stream, prompt: Prompt, init: bool) -> str:
        """Run a prompted step for one object on the stream's latest frame and store it.

        As sam2, a click on a frame where the object already has an output feeds that
        output's logits to the decoder with the points; a queued prompt (a frame not yet
        tracked) has none. init=False reads memory (a correction); init=True does not."""
        t = self.tracker
        f = stream.frame
        obj = stream.objects.get(prompt.obj_id)
        queued = obj is None or init and obj.created_frame != f
        prev = None if queued else t.bank.logits[obj.slot:obj.slot + 1]
        if obj is None:
            obj = ObjectInfo(prompt.obj_id, stream.free_slot(), f, f)
            t.bank.clear(obj.slot)
        sel = None if init else t.bank.select(obj.slot, f)
        out, mode = self.run(prompt, stream, sel, prev)
        t.bank.write(obj.slot, f, out.mem_feats[0], out.obj_ptr[0], out.low_res_logits[0],
                     out.score, init or t.cfg.corrections_as_cond, correction=not init)
        obj.last_prompt_frame = f
        stream.objects[prompt.obj_id] = obj
        t.stats['prompt_steps'] += 1
        t.stats[f'prompt_{mode}_steps'] += 1
        return mode

    def run(self, prompt: Prompt, stream: Stream, sel, prev) -> Tuple[step.StepOut, str]:
        """The prompted step through the runner (a graph where one fits) on the stream's
        frame of its latest step's features: (outputs, mode)."""
        t = self.tracker
        (h, w), feats, pos = stream.hw, stream.step_features, stream.position
        if prompt.mask is not None:
            mask = prompt_mask(prompt, h, w, t.size, t.device)
            return t.runner.mask_prompt(feats, mask, pos)
        points = prompt_points(prompt, h, w, t.size, t.device)
        return t.runner.prompt(feats, t.bank, sel, points, prev, t.maskmem_pos, pos)
