"""An lm-eval model that replays bakeoff's own answers (``Replay``), so lm-eval scores the very answers bakeoff
generated. Imports lm-eval when loaded: ``bakeoff.evaluate.lmeval.replay`` loads it when an evaluation reuses them.
"""

from __future__ import annotations

from lm_eval.api.model import LM


class Replay(LM):
    """Answers each ``generate_until`` request with ``answers[prompt]`` (the rendered prompt → bakeoff's answer);
    a prompt bakeoff did not answer is a KeyError (its prompt rendering differs from lm-eval's)."""

    def __init__(self, answers: dict[str, str]):
        super().__init__()
        self.answers = answers

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for r in requests:
            context = r.args[0]
            if context not in self.answers:
                raise KeyError(
                    f"lm-eval asked for a prompt bakeoff did not answer (its prompt rendering "
                    f"differs from ours): {context[-200:]!r}"
                )
            out.append(self.answers[context])
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("replayed answers have no log-probabilities: use eval.lm_eval: generate")

    loglikelihood_rolling = loglikelihood
