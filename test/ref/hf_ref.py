"""The PyTorch reference (llama_ref) on Hugging Face directories, in float64, for fsdpc's import tests.

usage: /usr/bin/python3 test/ref/hf_ref.py generate PROMPT N DIR OUT [DIR OUT ...]
           writes to each OUT the PROMPT and N greedy tokens of DIR's model as bytes, as fsdpc's
           byte tokenizer prints them (ids past 255 print nothing)
       /usr/bin/python3 test/ref/hf_ref.py loss DIR TEXTFILE
           mean next-token loss over every sample of the text read as bytes: T+1 tokens with
           stride T (T = max_position_embeddings), as fsdpc's data loader cuts them
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import generate_greedy, load_hf, loss_fn  # noqa: E402


def main():
    args = sys.argv[1:]
    if len(args) >= 5 and args[0] == "generate" and len(args) % 2 == 1:
        prompt, n = args[1].encode(), int(args[2])
        for model_dir, out in zip(args[3::2], args[4::2]):
            ids = generate_greedy(load_hf(model_dir, torch.float64), prompt, n)
            with open(out, "wb") as f:
                f.write(bytes(i for i in ids if i < 256))
    elif len(args) == 3 and args[0] == "loss":
        model = load_hf(args[1], torch.float64)
        T = model.cfg.max_context_width
        data = np.fromfile(args[2], dtype=np.uint8).astype(np.int64)
        chunks = torch.from_numpy(np.stack([data[i * T:i * T + T + 1] for i in range((len(data) - 1) // T)]))
        with torch.no_grad():
            print(f"{loss_fn(model(chunks[:, :-1]), chunks[:, 1:]).item():.12g}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
