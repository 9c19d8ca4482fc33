"""A real, unmodified agent harness: the OpenAI Agents SDK (``openai-agents`` from PyPI), a main
agent with a sub-agent used as a tool and a handoff, pointed at the gateway by base URL and key
only. Runs once over chat completions and once over the Responses API (the SDK's default).

    python harness_agents.py BASE_URL KEY
"""

import asyncio
import json
import sys

from agents import (
    Agent,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


def build(model) -> Agent:
    settings = ModelSettings(max_tokens=16)
    translator = Agent(name="translator", instructions="Translate the text to French.", model=model,
                       model_settings=settings)
    billing = Agent(name="billing", instructions="You answer billing questions.", model=model,
                    model_settings=settings)
    return Agent(name="triage", instructions="Help the user; translate or hand off to billing.", model=model,
                 model_settings=settings, handoffs=[billing],
                 tools=[translator.as_tool(tool_name="translate", tool_description="Translate text to French")])


async def main() -> None:
    base_url, key = sys.argv[1], sys.argv[2]
    set_tracing_disabled(True)  # no telemetry leaves the machine
    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    outputs = {}
    for name, model in [("chat", OpenAIChatCompletionsModel(model="tiny", openai_client=client)),
                        ("responses", OpenAIResponsesModel(model="tiny", openai_client=client))]:
        try:
            result = await Runner.run(build(model), "Please translate 'good morning'.", max_turns=4)
            outputs[name] = str(result.final_output)
        except ModelBehaviorError as exc:
            # The SDK's own verdict on a reply cut at max_output_tokens (the tiny random model
            # rarely ends on its own): the gateway answered; anything else would propagate.
            if "max_output_tokens" not in str(exc):
                raise
            outputs[name] = "incomplete"
    print(json.dumps(outputs))


if __name__ == "__main__":
    asyncio.run(main())
