"""Prompts from chat messages, rendered with the checkpoint's own chat template.

Messages are in the Hugging Face form: `content` is a string or a list of parts
`{"type": "text", "text": ...}` / `{"type": "image"}`. LLaVA-family templates render an image
part as the image placeholder token, which the TokenizerManager expands to the vision tower's
patch count. A template that renders no placeholder leaves the images to the TokenizerManager's
default place (the start of the prompt).

The rendered text already holds whatever special tokens the template emits (BOS included), so it
is tokenized without adding special tokens again -- as `apply_chat_template(tokenize=True)` does.
"""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateError

from vla_server.errors import RequestError


def chat_prompt_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    field: str,
    *,
    continue_final_message: bool = False,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Token ids of `messages` followed by the assistant's generation prompt, or, with
    `continue_final_message`, ending inside the last (assistant) message so generation
    continues it. `template_kwargs` reach the template as variables (SGLang's
    `chat_template_kwargs`)."""
    if not getattr(tokenizer, "chat_template", None):
        raise RequestError("this checkpoint has no chat template; use POST /generate", field)
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=not continue_final_message,
            continue_final_message=continue_final_message,
            **(template_kwargs or {}),
        )
    except TypeError as e:  # a template kwarg that collides with the ones set here
        raise RequestError(str(e), "chat_template_kwargs") from None
    except (TemplateError, ValueError) as e:
        raise RequestError(f"the model's chat template rejected the messages: {e}", field) from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
