"""Cell helpers shared by the notebook generators in tools/ (make_notebook*.py)."""
from nbformat.v4 import new_code_cell, new_markdown_cell

# Output that depends on timing, the machine or widget state: nbval runs the cell but does not
# compare its output.  Facts go in untagged cells, printed deterministically and asserted.
IGNORE = {"tags": ["nbval-ignore-output"]}


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str, ignore: bool = False):
    return new_code_cell(text.strip(), metadata=IGNORE if ignore else {})


def write(path, cells) -> None:
    """Write ``cells`` as a validated notebook for the course's Python 3 kernel."""
    import nbformat
    from nbformat.v4 import new_notebook

    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}})
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print("wrote", path)
