"""Jinja chat templates of the locally built tokenizer families.

Each mimics the shape of a real family's template (written here, not copied):

* ``CHATML_TEMPLATE`` – Qwen2.5-style ChatML: ``<|im_start|>role\\n…<|im_end|>\\n``; tool results are wrapped in
  ``<tool_response>`` tags inside a ``user`` turn, and consecutive tool results share that turn.
* ``LLAMA3_TEMPLATE`` – Llama-3-style headers: ``<|start_header_id|>role<|end_header_id|>\\n\\n…<|eot_id|>``;
  tool results use the ``ipython`` header. No BOS in the text: the tokenizer's post-processor adds ``<s>``.
* ``QWEN3_TEMPLATE`` – Qwen3-style ChatML that is **not prefix-stable**: the last assistant message always
  carries a ``<think>`` block (empty if there was no reasoning) and every earlier assistant message has its
  ``<think>…</think>`` block dropped, so appending a message rewrites text rendered before it.
"""

from __future__ import annotations

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

LLAMA3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- set role = 'ipython' if message.role == 'tool' else message.role %}"
    "{{- '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- set reasoning = '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.last %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
