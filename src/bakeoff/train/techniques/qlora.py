"""QLoRA as its paper and PEFT run it: the frozen base quantized by bitsandbytes (4-bit NF4 with double
quantization by default, or 8-bit), the weights it leaves unquantized and the activations in the compute dtype (the
training precision), LoRA adapters in bf16 (TRL's SFTTrainer casts a quantized base's adapters to bf16, after the
paper), and gradient checkpointing on by default (``gradient_checkpointing: auto``)."""

from __future__ import annotations

from bakeoff.core import techniques as technique_options
from bakeoff.core.runs import Skipped
from bakeoff.train.techniques.lora import Lora


def device_map():
    """Where the quantized base goes: this process's GPU (``LOCAL_RANK``, 0 alone), or the CPU."""
    import os

    import torch

    return {"": int(os.environ.get("LOCAL_RANK", "0"))} if torch.cuda.is_available() else "cpu"


class QLora(Lora):
    name = "qlora"
    defaults = technique_options.defaults("qlora")

    def quantization_config(self, options: dict, precision: str):
        from transformers import BitsAndBytesConfig

        from bakeoff.core.models import DTYPES

        if options["bits"] == 8:
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=options["quant_type"],
            bnb_4bit_use_double_quant=options["double_quant"],
            bnb_4bit_compute_dtype=DTYPES[precision],
        )

    def _load_quantized(self, base_dir, variant, precision: str):
        """The base quantized by bitsandbytes, on this process's GPU when there is one (``LOCAL_RANK`` under
        torchrun / accelerate launch), its weights that stay unquantized (embeddings, norms, the head) in the compute
        dtype: an fp32 embedding would carry the whole hidden-state stream, and every activation saved for backward,
        in fp32."""
        from bakeoff.core.models import DTYPES, load_model

        return load_model(
            base_dir,
            dtype=DTYPES[precision],
            device_map=device_map(),
            quantization_config=self.quantization_config(variant.options, precision),
        )

    def build(self, base_dir, variant, precision, parent_dir=None):
        from peft import get_peft_model

        if variant.backend == "unsloth":
            from bakeoff.train.backends import unsloth

            if variant.options["bits"] != 4:
                raise Skipped("Unsloth's QLoRA path loads 4-bit only")
            return unsloth.build(base_dir, variant, precision, load_in_4bit=True)
        model = self._load_quantized(base_dir, variant, precision)
        # what PEFT's prepare_model_for_kbit_training does, but its upcast of every 16-bit weight to fp32: the base
        # frozen; checkpointing (gradient_checkpointing, on by default here) is the trainer's, non-reentrant, which
        # needs no input-grad hook
        for param in model.parameters():
            param.requires_grad = False
        return get_peft_model(model, self.lora_config(variant.options))

    def load_for_eval(self, base_dir, out_dir, variant, precision):
        """The adapter on the base it was trained against: quantized the same way, not merged into full weights."""
        from peft import PeftModel

        return PeftModel.from_pretrained(self._load_quantized(base_dir, variant, precision), out_dir).eval()

    def serving_dtype(self, variant, precision: str) -> str:
        o = variant.options
        return f"{o['quant_type'] if o['bits'] == 4 else 'int8'} + {precision} compute"

    def served_as(self, out_dir):
        return "unmerged"  # merging into 4-bit weights would round the adapter away

    def load_unmerged(self, base_dir, out_dir, variant, precision):
        return None  # load_for_eval already serves it unmerged

    def lm_eval_model(self, base_dir, out_dir):
        return None  # lm-eval gets the loaded 4-bit model (its hf loader would load the base unquantized)
