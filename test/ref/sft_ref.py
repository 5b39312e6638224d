"""Reference encodings for test/integration/test_sft.sh, with python3-sentencepiece.

  sft_ref.py cases SEED N                   chat JSON Lines on stdout: edge cases, then N random conversations
  sft_ref.py chat MODEL TEMPLATE FILE       one line of ids per conversation of FILE, as the template builds it
                                            (llama2: Meta's chat_completion in meta-llama/llama, llama/generation.py)
  sft_ref.py loss MODEL TEMPLATE FILE OUT   checks OUT (fsdpc tokenize --chat --labels: ids and labels lines) against
                                            FILE: exactly the answers (and their EOS / <|im_end|>) carry loss
  sft_ref.py prompt MODEL FILE              ids and labels lines for prompt/completion or Alpaca rows (Stanford's prompts)
Exits 1 with a message on the first difference (loss).
"""
import json
import random
import sys

import sentencepiece

B_INST, E_INST = "[INST]", "[/INST]"
B_SYS, E_SYS = "<<SYS>>\n", "\n<</SYS>>\n\n"
SHAREGPT = {"human": "user", "gpt": "assistant", "system": "system"}


def messages(row):
    if "messages" in row:
        return [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
    return [{"role": SHAREGPT[m["from"]], "content": m["value"]} for m in row["conversations"]]


def llama2(sp, dialog):
    """Meta's reference: system folded into the first user turn, then one encode per user/assistant pair."""
    def encode(text, bos, eos):
        return ([sp.bos_id()] if bos else []) + sp.encode(text) + ([sp.eos_id()] if eos else [])

    if dialog[0]["role"] == "system":
        merged = B_SYS + dialog[0]["content"] + E_SYS + dialog[1]["content"]
        dialog = [{"role": dialog[1]["role"], "content": merged}] + dialog[2:]
    assert all(m["role"] == "user" for m in dialog[0::2]) and all(m["role"] == "assistant" for m in dialog[1::2])
    ids = []
    for user, answer in zip(dialog[0::2], dialog[1::2]):
        ids += encode(f"{B_INST} {user['content'].strip()} {E_INST} {answer['content'].strip()} ", True, True)
    if dialog[-1]["role"] == "user":
        ids += encode(f"{B_INST} {dialog[-1]['content'].strip()} {E_INST}", True, False)
    return ids


def chatml(sp, dialog):
    start, end = sp.piece_to_id("<|im_start|>"), sp.piece_to_id("<|im_end|>")
    ids = []
    for m in dialog:
        ids += [start] + sp.encode(m["role"] + "\n" + m["content"]) + [end] + sp.encode("\n")
    return ids


def plain(sp, dialog):
    ids = [sp.bos_id()]
    for m in dialog:
        ids += sp.encode(m["content"])
    return ids + [sp.eos_id()]


TEMPLATES = {"llama2": llama2, "chatml": chatml, "none": plain}


def cases(seed, n):
    r = random.Random(seed)
    words = open("data/tinyshakespeare.txt", encoding="utf-8").read().split()
    spaces = [" ", "  ", "\t", "\n", "\n\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u2003", "\x85", "\x1c", "\u200b", "\r\n", "\v\f"]
    extra = ["café", "naïve", "Привет", "你好", "😀", "[INST]", "<<SYS>>", "</s>", "<s>", "\u2581", "e\u0301", "１２３"]

    def text():
        parts = [r.choice(spaces)] if r.random() < 0.3 else []
        for _ in range(r.randint(0, 12)):
            parts.append(r.choice(words) if r.random() < 0.8 else r.choice(extra))
            parts.append(r.choice(spaces) if r.random() < 0.25 else " ")
        if parts and r.random() < 0.5:
            parts.pop()
        return "".join(parts)

    fixed = [
        [("user", "Hello"), ("assistant", "Hi! How can I help?")],
        [("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?"), ("assistant", "6"), ("user", "Thanks")],
        [("system", "You are terse."), ("user", "Name a colour."), ("assistant", "Red.")],
        [("system", "  Be kind.\n"), ("user", "\tHi\n"), ("assistant", "  Hello  "), ("user", "  bye  ")],
        [("user", "\u00a0\u3000 non-breaking and ideographic spaces \u2003\u00a0"), ("assistant", "\u2028line sep\u2029 ok \x85")],
        [("user", "tabs\tinside\tand\ttrailing\t\t"), ("assistant", "\n\nnewlines\n\n")],
        [("user", "Où est la bibliothèque ?"), ("assistant", "Привет, мир! 你好，世界。😀")],
        [("user", "only a question, no answer")],
        [("system", "sys"), ("user", "a final user turn after a system prompt")],
        [("user", ""), ("assistant", "")],
        [("user", "   "), ("assistant", " \t ")],
        [("user", "zero width\u200b stays (not whitespace)\u200b"), ("assistant", "\x1c\x1dfile separators strip\x1e\x1f")],
        [("user", "[INST] literal tags [/INST] <<SYS>>"), ("assistant", "</s> <s> literal")],
    ]
    out = []
    for conv in fixed:
        out.append({"messages": [{"role": a, "content": b} for a, b in conv]})
    out.append({"conversations": [{"from": "system", "value": "ShareGPT"}, {"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})
    for _ in range(n):
        conv = [("system", text())] if r.random() < 0.3 else []
        for turn in range(r.randint(1, 4)):
            conv.append(("user", text()))
            if turn < 3 or r.random() < 0.5:
                conv.append(("assistant", text()))
        if r.random() < 0.3 and conv[-1][0] == "assistant":
            conv.pop()
        if r.random() < 0.2:
            out.append({"conversations": [{"from": {"user": "human", "assistant": "gpt"}.get(a, a), "value": b} for a, b in conv]})
        else:
            out.append({"messages": [{"role": a, "content": b} for a, b in conv]})
    for row in out:
        print(json.dumps(row, ensure_ascii=r.random() < 0.5))


def loss(sp, template, rows, out_lines):
    """Each run of tokens with loss is one answer: its tokens but the last decode to the answer
    (stripped), and the last is EOS (llama2, none) or <|im_end|> (chatml); labels equal ids there."""
    end = sp.piece_to_id("<|im_end|>") if template == "chatml" else sp.eos_id()
    for i, row in enumerate(rows):
        dialog = messages(row)
        ids = [int(x) for x in out_lines[2 * i].split()]
        labels = [int(x) for x in out_lines[2 * i + 1].split()]
        if len(ids) != len(labels):
            sys.exit(f"conversation {i + 1}: {len(ids)} ids but {len(labels)} labels")
        runs, run = [], []
        for t, (a, b) in enumerate(zip(ids, labels)):
            if b != -1:
                if a != b:
                    sys.exit(f"conversation {i + 1}: label {b} at {t} is not the id {a}")
                run.append(a)
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        answers = [m["content"] for m in dialog if m["role"] == "assistant"]
        if template == "llama2":  # Meta's pairs: each answer follows a user turn
            if dialog[0]["role"] == "system":
                dialog = dialog[1:]
            answers = [m["content"] for m in dialog[1::2]]
        if template == "none":  # each message encoded on its own: the loss tokens are the answers' and EOS after a last one
            want = [t for a in answers for t in sp.encode(a)] + ([end] if dialog[-1]["role"] == "assistant" else [])
            if [t for r in runs for t in r] != want:
                sys.exit(f"conversation {i + 1}: the loss tokens are not the assistant messages' (and EOS)")
            continue
        if len(runs) != len(answers):
            sys.exit(f"conversation {i + 1}: {len(runs)} runs of loss tokens for {len(answers)} answers")
        for k, (r, a) in enumerate(zip(runs, answers)):
            if r[-1] != end:
                sys.exit(f"conversation {i + 1}: answer {k + 1}'s loss does not end with the end token")
            if sp.decode(r[:-1]).strip() != a.strip().replace("\u2581", " ").strip():  # SentencePiece decodes '▁' as a space
                sys.exit(f"conversation {i + 1}: answer {k + 1}'s loss tokens decode to {sp.decode(r[:-1])!r}, not {a.strip()!r}")
    if len(out_lines) != 2 * len(rows):
        sys.exit(f"{len(out_lines)} lines for {len(rows)} conversations")


ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further context. "
                "Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:")
ALPACA_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
                   "### Instruction:\n{instruction}\n\n### Response:")


def prompt_rows(sp, rows):
    for row in rows:
        if "prompt" in row:
            p, a = row["prompt"], row["completion"]
        else:
            p = (ALPACA_INPUT if row.get("input") else ALPACA_NO_INPUT).format(**row)
            a = row["output"]
        pi, ai = [sp.bos_id()] + sp.encode(p), sp.encode(a) + [sp.eos_id()]
        print("ids: " + " ".join(map(str, pi + ai)))
        print("labels: " + " ".join(map(str, [-1] * len(pi) + ai)))


def main():
    cmd = sys.argv[1]
    if cmd == "cases":
        return cases(int(sys.argv[2]), int(sys.argv[3]))
    sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[2])
    if cmd == "prompt":
        return prompt_rows(sp, [json.loads(l) for l in open(sys.argv[3], encoding="utf-8") if l.strip()])
    template = sys.argv[3]
    rows = [json.loads(l) for l in open(sys.argv[4], encoding="utf-8") if l.strip()]
    if cmd == "chat":
        for row in rows:
            print(" ".join(map(str, TEMPLATES[template](sp, messages(row)))))
    elif cmd == "loss":
        loss(sp, template, rows, open(sys.argv[5], encoding="utf-8").read().splitlines())


if __name__ == "__main__":
    main()
