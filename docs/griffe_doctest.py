"""Show docstring examples and literal blocks as code in the API reference.

pullback's docstrings hold plain doctest sessions, which Markdown would read as nested
quotes, and a few reStructuredText literal blocks (a line ending in `::` followed by an
indented block), which Markdown would read as prose. This extension for griffe (the
docstring reader behind mkdocstrings) fences both as code before a docstring is rendered;
the docstrings themselves, and the doctests pytest runs from them, are unchanged.

>>> fence("Text.\\n\\n>>> 1 + 1\\n2\\n\\nMore.").splitlines()
['Text.', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'More.']
>>> fence("A file::\\n\\n    {'a': 1}\\n\\nDone.").splitlines()
['A file:', '', '```text', "{'a': 1}", '```', '', 'Done.']
>>> fence("- A list item::\\n\\n      x = 1\\n").splitlines()
['- A list item:', '', '    ```text', '    x = 1', '    ```']
"""

import re

import griffe


def _indent(line):
    return len(line) - len(line.lstrip())


def fence(text):
    """`text` with doctest sessions fenced as `pycon` and `::` literal blocks fenced as `text`.

    A session runs from a `>>>` line to the next blank line. A literal block is every
    following line indented deeper than the line that ends in `::` (blank lines included).
    """
    lines, out, i, in_fence = text.splitlines(), [], 0, False
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and stripped.startswith(">>>"):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            pad = line[: _indent(line)]
            out += [pad + "```pycon", *lines[i:end], pad + "```"]
            i = end
            continue
        elif not in_fence and stripped.endswith("::") and stripped != "::":
            out += [line[:-1], ""]
            start = i + 1
            while start < len(lines) and not lines[start].strip():
                start += 1
            end = start
            while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(line)):
                end += 1
            while end > start and not lines[end - 1].strip():
                end -= 1
            if end > start:
                # Fence at the column the text of the `::` line starts in (a list item's
                # continuation is indented four spaces), keeping the block's own indentation.
                pad = _indent(line) + (4 if re.match(r"\s*([-*+]|\d+\.)\s", line) else 0)
                cut = min(_indent(x) for x in lines[start:end] if x.strip()) - pad
                block = [x[cut:] if x.strip() else "" for x in lines[start:end]]
                out += [" " * pad + "```text", *block, " " * pad + "```"]
            i = end
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fence the doctest sessions and literal blocks of every docstring griffe reads."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = fence(obj.docstring.value)
