"""Cell helpers shared by the notebook generators in tools/ (make_notebook*.py)."""
from nbformat.v4 import new_code_cell, new_markdown_cell

# Output that depends on timing, the machine or widget state: nbval runs the cell but does not
# compare its output.  Facts go in untagged cells, printed deterministically and asserted.
IGNORE = {"tags": ["nbval-ignore-output"]}


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str, ignore: bool = False):
    return new_code_cell(text.strip(), metadata=IGNORE if ignore else {})
