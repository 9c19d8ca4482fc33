"""A harness process for the drain tests: streams one long chat completion through the
gateway with the official ``openai`` client and prints what it saw as one JSON line.

    python harness_stream.py BASE_URL KEY MAX_TOKENS
"""

import json
import sys

import openai


def main() -> None:
    base_url, key, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    seen = {"content": "", "num_chunks": 0, "ids": [], "finish_reasons": [], "error": None}
    try:
        stream = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Write a long story."}],
            max_tokens=max_tokens, temperature=0, stream=True, extra_body={"ignore_eos": True})
        for chunk in stream:
            seen["num_chunks"] += 1
            if chunk.id not in seen["ids"]:
                seen["ids"].append(chunk.id)
            for choice in chunk.choices:
                seen["content"] += choice.delta.content or ""
                if choice.finish_reason:
                    seen["finish_reasons"].append(choice.finish_reason)
            print("chunk", flush=True, file=sys.stderr)
    except Exception as exc:  # the test asserts there is none; report it rather than crash
        seen["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
