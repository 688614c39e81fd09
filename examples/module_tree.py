"""Which part of my model takes the time: the module tree of a transformers Llama.

A 4-layer Llama built from its config (random weights, nothing downloaded) runs a forward
under ``@profile_on_neuron``; the result's module table says which module took the time,
with repeated layers folded, and ``report.html`` draws it (icicle, timeline, memory).

    python examples/module_tree.py [--layers 4] [--report]
"""

from __future__ import annotations

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from neuronscope import profile_on_neuron


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--report", action="store_true", help="also write report.html into the run")
    args = parser.parse_args()
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=args.layers, num_attention_heads=8,
                      num_key_value_heads=4, vocab_size=2048, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 128))

    @profile_on_neuron(name="llama_forward", profile_memory=True)
    def forward() -> torch.Tensor:
        with torch.no_grad():
            return model(input_ids=ids).logits

    forward()  # warm-up, unprofiled
    forward()  # captured
    result = forward.last_result
    if result is not None:
        print(result.table())  # the op table, the module tree (layers folded) and the hints
    if args.report and result is not None and result.run_dir:
        from neuronscope.report.html import write_report

        print(f"report: {write_report(result)}")


if __name__ == "__main__":
    main()
