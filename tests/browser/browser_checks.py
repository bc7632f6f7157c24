"""What the browser suite does to one lesson: open it in JupyterLab, Run All, look, move every control.

Why a real browser: nbval checks what a kernel prints, but a learner sees what JupyterLab draws.
Widgets only exist in the browser (a missing widget manager shows "Loading widget..." or a text
repr like ``VBox(children=...)``), so the only honest check is to open each lesson the way a
learner does, press Run All, and look.  ``check_lesson`` does it for one notebook and raises an
AssertionError listing every problem (tests/browser/browser_course.py runs it for every lesson,
inside the simulated Binder; test_notebooks_in_browser.py reports it):

* every code cell ran, and no cell raised unless it is tagged ``raises-exception``;
* the outputs equal the stored ones where nbval would compare them (stored_outputs.py): this run
  is also the suite's nbval run of the lesson (issue 25);
* every widget rendered: no "Loading widget...", no "Error displaying widget", no text repr such
  as ``VBox(children=...)`` in place of a widget;
* every control of every interactive widget (slider, dropdown, toggle buttons, ...) changes what
  the widget shows when it is moved;
* pictures fit a laptop screen (1366x768): nothing wider than the notebook, no picture shrunk to
  fit, every interactive widget no taller than the visible part of the notebook.

Screenshots of each notebook after running and after the interactions go to artifacts/browser/
(not committed): look at them for readable labels and colour-blind-safe colours.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import ipywidgets
import nbformat

from stored_outputs import differences

LAPTOP = {"width": 1366, "height": 768}   # a common laptop screen: the page size for every check

# Generous limits: they only matter when something hangs. Lessons take < 60 s under nbval on a quiet
# machine; a loaded 2-core machine was seen taking 75 s to open a notebook and 160 s to run one, and
# under Binder's one-CPU quota beside other tests, 322 s.
OPEN_TIMEOUT = 180     # s for JupyterLab to show the notebook and its kernel to start
RUN_TIMEOUT = 900      # s for Run All
CHANGE_TIMEOUT = 30    # s for a widget to redraw after a control moved
ACTION_TIMEOUT = 180   # s for a button's work (e.g. "measure" runs real launches) to show its result

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# class names of every ipywidgets widget: "VBox(children=...)" printed as text means it did not render
WIDGET_NAMES = sorted(n for n in dir(ipywidgets)
                      if isinstance(getattr(ipywidgets, n), type)
                      and issubclass(getattr(ipywidgets, n), ipywidgets.Widget))
WIDGET_REPR = re.compile(r"^\s*(?:%s)\(" % "|".join(WIDGET_NAMES), re.MULTILINE)
NOT_RENDERED = ("Loading widget...", "Error displaying widget", "Model not found", "model not found")

# what a learner can move, as CSS selectors inside a cell's output area
CONTROLS = {
    "slider": ".widget-slider .noUi-handle",
    "dropdown": ".widget-dropdown select",
    "select": ".widget-select select",
    "toggle-buttons": ".widget-toggle-buttons",
    "radio-buttons": ".widget-radio-box",
    "checkbox": ".widget-checkbox input[type=checkbox]",
    "toggle-button": "button.widget-toggle-button",
}
# buttons that start work ("measure", "run"): the other controls of their widget are its inputs
ACTION_BUTTONS = "button.widget-button"
# the part of a control that shows its own state (removed before comparing what the widget shows)
CONTROL_ROOTS = (".widget-slider, .widget-dropdown, .widget-select, .widget-toggle-buttons, "
                 ".widget-radio, .widget-checkbox, .widget-toggle-button, .widget-play, "
                 ".widget-button, .widget-text, .widget-textarea")

JS_CELLS = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')).map(cell => ({
  code: cell.classList.contains('jp-CodeCell'),
  prompt: (cell.querySelector('.jp-InputPrompt') || {textContent: ''}).textContent.trim(),
  outputs: Array.from(cell.querySelectorAll('.jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output'))
    .map(o => {
      const widgets = Array.from(o.querySelectorAll('.jupyter-widgets')).filter(w => {
        const r = w.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
      return {mime: o.getAttribute('data-mime-type'), text: o.innerText.slice(0, 3000),
              widgets: widgets.length, scrollWidth: o.scrollWidth, clientWidth: o.clientWidth};
    }),
  images: Array.from(cell.querySelectorAll('.jp-Cell-outputArea img')).map(i => ({
    natural: i.naturalWidth, shown: Math.round(i.getBoundingClientRect().width)})),
}))"""

JS_KERNEL_STATUS = """() => {
  const items = Array.from(document.querySelectorAll('.jp-StatusBar-TextItem')).map(e => e.textContent);
  return items.find(t => / \\| /.test(t)) || '';
}"""

JS_MARK_CONTROLS = """([area, controls, controlRoots]) => {
  const found = [];
  for (const [kind, sel] of Object.entries(controls)) {
    area.querySelectorAll(sel).forEach(el => {
      if (kind === 'toggle-button' && el.closest('.widget-toggle-buttons')) return;
      if (kind === 'button' && (el.matches('.widget-toggle-button') || el.closest('.widget-play'))) return;
      const disabled = el.matches(':disabled') || !!el.closest('[disabled]')
                       || !!el.closest('.noUi-target[disabled]');
      if (disabled) return;
      const root = el.closest(controlRoots) || el;
      const label = root.querySelector(':scope > .widget-label');
      const id = kind + '-' + found.length;
      el.setAttribute('data-distlab-control', id);
      found.push({id, kind, label: label ? label.textContent.trim() : ''});
    });
  }
  return found;
}"""

JS_DISPLAY = """([area, controlRoots]) => {
  // what the widget shows, without the controls' own state (a slider's readout always changes)
  const outside = el => !el.closest(controlRoots);
  const clone = area.cloneNode(true);
  clone.querySelectorAll(controlRoots).forEach(el => el.remove());
  return ({
    text: clone.textContent,
    images: Array.from(area.querySelectorAll('img')).filter(outside).map(i => i.src),
    canvases: Array.from(area.querySelectorAll('canvas')).filter(outside).map(c => c.toDataURL()),
    svgs: Array.from(area.querySelectorAll('svg')).filter(outside)
      .filter(s => !s.closest('.jp-OutputArea-promptOverlay')).map(s => s.outerHTML),
  });
}"""

JS_VISIBLE_HEIGHT = """() => {
  const o = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
  return [o.clientHeight, o.scrollHeight];
}"""

JS_CONTROLS_HEIGHT = """([area, selector]) => Math.max(0, ...Array.from(
  area.querySelectorAll(':scope > .jp-OutputArea-child > .jp-OutputArea-output'))
  .filter(o => o.querySelector(selector)).map(o => o.getBoundingClientRect().height))"""

JS_SCROLL_TO_TOP = """() => {
  document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer').scrollTop = 0;
  return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
}"""


def kernel_status(page) -> str:
    return page.evaluate(JS_KERNEL_STATUS)


def wait_for(condition, timeout: float, what, poll: float = 0.25):
    """Poll ``condition()`` until it returns something truthy; fail with ``what`` on timeout.

    ``what`` may be a function, called at the timeout, to describe the state then.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for "
                                 f"{what() if callable(what) else what}")
        time.sleep(poll)


def wait_for_idle_kernel(page, timeout: float = 120, settle: float = 1.0) -> None:
    """The status bar says "| Idle" and no cell is queued ([*]) for ``settle`` seconds in a row.

    Between two queued cells the kernel is idle for a moment; the queued cells still show [*],
    and a short settling time covers the rest.
    """
    since = None

    def idle():
        nonlocal since
        prompts = page.eval_on_selector_all(".jp-NotebookPanel .jp-InputPrompt",
                                            "els => els.map(e => e.textContent)")
        status = kernel_status(page)
        if status.endswith(("| Dead", "| Unknown")):
            raise AssertionError(f"the kernel died (status bar: {status!r}); out of memory?")
        now_idle = status.endswith("| Idle") and not any("*" in p for p in prompts)
        if not now_idle:
            since = None
            return False
        since = since or time.monotonic()
        return time.monotonic() - since >= settle

    def state():
        prompts = page.eval_on_selector_all(".jp-NotebookPanel .jp-InputPrompt",
                                            "els => els.map(e => e.textContent.trim())")
        busy = [i for i, p in enumerate(prompts) if "*" in p]
        return (f"an idle kernel (status bar: {kernel_status(page)!r}; "
                f"code cells still running or queued: {busy})")

    wait_for(idle, timeout, state)


def no_dialog(page) -> None:
    dialog = page.locator(".jp-Dialog")
    if dialog.count():
        raise AssertionError(f"unexpected JupyterLab dialog: {dialog.first.inner_text()!r}")


def no_news_toast(page) -> None:
    """Issue 26: a learner's first JupyterLab start asks nothing about Jupyter news: the project's
    ``binder/overrides.json`` (installed by ``tools/install_lab_settings.sh``) says no for them."""
    toasts = page.locator(".Toastify__toast, .jp-toast-message")
    said = [toasts.nth(i).inner_text() for i in range(toasts.count())]
    news = [t for t in said if "news" in t.lower() or "update" in t.lower()]
    if news:
        raise AssertionError(f"JupyterLab greeted the learner with a toast: {news!r}")


def click_menu_item(page, menu: str, command: str, attempts: int = 3) -> None:
    """Open a menu of the menu bar and click one of its items (retried: menus open on a click)."""
    item = page.locator(f'.lm-Menu [data-command="{command}"]')
    for attempt in range(attempts):
        page.keyboard.press("Escape")
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).first.click()
        try:
            item.first.wait_for(state="visible", timeout=5_000)
            item.first.click()
            return
        except Exception:
            if attempt == attempts - 1:
                raise


def open_notebook(page, server, name: str) -> None:
    workspace = f"test-{time.monotonic_ns()}"      # a new workspace: no tabs restored from earlier tests
    page.goto(f"{server.url}/lab/workspaces/{workspace}/tree/{name}?reset&token={server.token}",
              timeout=OPEN_TIMEOUT * 1000)
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(timeout=OPEN_TIMEOUT * 1000)
    wait_for(lambda: kernel_status(page).endswith("| Idle"), OPEN_TIMEOUT,
             lambda: f"the kernel to start (status bar: {kernel_status(page)!r})")
    no_dialog(page)
    no_news_toast(page)


def run_all(page) -> None:
    click_menu_item(page, "Run", "runmenu:run-all")
    wait_for(lambda: any(p != "[ ]:" for p in page.eval_on_selector_all(
        ".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt", "els => els.map(e => e.textContent.trim())")),
        30, "Run All to start a cell")
    wait_for_idle_kernel(page, timeout=RUN_TIMEOUT, settle=1.5)


def save(page, path: Path) -> nbformat.NotebookNode:
    """Save through the File menu and read back what JupyterLab wrote: the outputs as it holds them."""
    before = path.stat().st_mtime_ns
    click_menu_item(page, "File", "docmanager:save")
    wait_for(lambda: path.stat().st_mtime_ns != before, 30, f"{path.name} to be saved")
    return wait_for(lambda: _read(path), 10, f"{path.name} to be readable")


def _read(path: Path):
    try:
        return nbformat.read(path, as_version=4)
    except (json.JSONDecodeError, nbformat.reader.NotJSONError):
        return None


def screenshot_notebook(page, path: Path) -> None:
    """The whole notebook in one picture, 1366 px wide: the window is made as tall as the notebook."""
    visible, total = page.evaluate(JS_VISIBLE_HEIGHT)
    page.set_viewport_size({"width": LAPTOP["width"],
                            "height": min(LAPTOP["height"] + total - visible, 16_000)})
    page.evaluate(JS_SCROLL_TO_TOP)
    page.screenshot(path=str(path))
    page.set_viewport_size(LAPTOP)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def find_problems(nb_source, saved, cells) -> list[str]:
    """Everything wrong with a run, as readable lines (empty when the notebook is fine)."""
    problems = []
    if len(cells) != len(nb_source.cells):
        return [f"the page shows {len(cells)} cells, the notebook has {len(nb_source.cells)}"]
    for i, (src, run, shown) in enumerate(zip(nb_source.cells, saved.cells, cells)):
        where = f"cell {i} ({src.source.strip().splitlines()[0][:60] if src.source.strip() else 'empty'!r})"
        if src.cell_type != "code":
            continue
        expected_error = "raises-exception" in src.metadata.get("tags", [])
        if not re.fullmatch(r"\[\d+\]:", shown["prompt"]):
            problems.append(f"{where} did not run (prompt {shown['prompt']!r})")
        for out in run.get("outputs", []):
            if expected_error:
                break
            if out.output_type == "error":
                problems.append(f"{where} raised {out.ename}: {out.evalue}")
            elif out.output_type == "stream" and "Traceback (most recent call last)" in out.text:
                problems.append(f"{where} printed a traceback:\n{out.text[-1500:]}")
        for out in shown["outputs"]:
            for marker in NOT_RENDERED:
                if marker in out["text"]:
                    problems.append(f"{where} shows {marker!r} instead of a widget")
            if out["mime"] == "text/plain" and WIDGET_REPR.search(out["text"]):
                problems.append(f"{where} shows a widget as text: {out['text'][:120]!r}")
            text_output = (out["mime"] or "").startswith(("text/plain", "application/vnd.jupyter.std"))
            if not text_output and out["scrollWidth"] > out["clientWidth"] + 2:
                problems.append(f"{where}: an output is {out['scrollWidth']} px wide, wider than the "
                                f"notebook ({out['clientWidth']} px) on a {LAPTOP['width']} px screen")
        views = sum(WIDGET_VIEW in out.get("data", {}) for out in run.get("outputs", []))
        rendered = sum(out["widgets"] > 0 for out in shown["outputs"])
        # a widget closed by the kernel (e.g. a tqdm bar with leave=False) leaves a blank output
        closed = sum(out["widgets"] == 0 and not out["text"].strip() for out in shown["outputs"])
        if rendered + closed < views:
            problems.append(f"{where} has {views} widget outputs but {rendered} rendered on the page")
        for img in shown["images"]:
            if img["natural"] and img["shown"] < 0.95 * img["natural"]:
                problems.append(f"{where}: a {img['natural']} px wide picture is shrunk to {img['shown']} px "
                                f"to fit a {LAPTOP['width']} px screen (its labels shrink too)")
    return problems


def change_control(page, control, kind: str) -> str:
    """Move one control the way a learner would; return what was done."""
    if kind == "slider":
        control.focus()
        before = control.get_attribute("aria-valuenow")
        control.press("ArrowRight")
        if control.get_attribute("aria-valuenow") == before:      # already at its maximum
            control.press("ArrowLeft")
        return f"slider {before} -> {control.get_attribute('aria-valuenow')}"
    if kind in ("dropdown", "select"):
        options = control.locator("option")
        values = [options.nth(k).get_attribute("value") for k in range(options.count())]
        current = control.evaluate("s => Array.from(s.selectedOptions).map(o => o.value)")
        choice = next(v for v in values if v not in current)
        control.select_option(choice)
        return f"{kind} {current} -> {choice!r}"
    if kind == "toggle-buttons":
        button = control.locator("button:not(.mod-active)").first
        text = button.inner_text()
        button.click()
        return f"toggle button -> {text!r}"
    if kind == "radio-buttons":
        radio = control.locator("input[type=radio]:not(:checked)").first
        radio.check()
        return "radio button"
    control.click()                                                 # checkbox, toggle button
    return kind


def kernel_log(page) -> str:
    """What the kernel wrote outside any cell (e.g. a widget callback that raised), or ''.

    JupyterLab sends it to its log console and shows a count in the status bar; open it and read.
    """
    item = page.locator(".jp-LogConsoleStatusItem:not(.lm-mod-hidden)")
    if not item.count():
        return ""
    item.click()
    log = page.locator(".jp-LogConsole")
    log.first.wait_for(state="visible", timeout=10_000)
    wait_for(lambda: log.first.inner_text().strip(), 10, "the log console to show its messages")
    return log.first.inner_text().strip()


def display_of(page, area) -> dict:
    return page.evaluate(JS_DISPLAY, [area.element_handle(), CONTROL_ROOTS])


def shows_something_new(before: dict, after: dict) -> bool:
    """A widget with pictures must show a different picture; one with only text, different text.

    (A status line that changes while the picture stays the same, e.g. "measuring..." followed
    by a failure, is not a widget that works.)
    """
    def pictures(d):
        return d["images"], d["canvases"], d["svgs"]
    if any(pictures(before)) or any(pictures(after)):
        return pictures(before) != pictures(after)
    return before["text"] != after["text"]


def settled_change(page, area, before: dict, timeout: float) -> bool:
    """Wait until the display differs from ``before`` and the kernel is idle; compare again then."""
    try:
        wait_for(lambda: shows_something_new(before, display_of(page, area)), timeout, "a change")
        wait_for_idle_kernel(page, timeout=timeout, settle=0.5)
    except AssertionError:
        return False
    # a redraw may clear the output and draw again: compare once it has settled
    return shows_something_new(before, display_of(page, area))


def check_interactions(page, cell_index: int, area, shots: Path) -> tuple[list[str], list[str]]:
    """Move every control in one cell's output; each must change what the cell shows.

    In a widget with an action button ("measure"), the controls are the inputs of the action:
    when moving the first control changes nothing by itself, the button is pressed once and the
    display must change then; its other controls are not checked (each would need a new action).
    """
    problems, done = [], []
    found = page.evaluate(JS_MARK_CONTROLS, [area.element_handle(), CONTROLS | {"button": ACTION_BUTTONS},
                                             CONTROL_ROOTS])
    controls = [c for c in found if c["kind"] != "button"]
    buttons = [c for c in found if c["kind"] == "button"]
    if not controls and buttons:
        controls = [None]                 # a widget with only a button: pressing it is the interaction
    for k, c in enumerate(controls):
        before = display_of(page, area)
        if k == 0:
            area.screenshot(path=str(shots.with_name(f"{shots.name}-cell{cell_index:02d}-before.png")))
        changed, action, label = False, "", "widget"
        if c is not None:
            control = area.locator(f'[data-distlab-control="{c["id"]}"]')
            label = f"{c['kind']} {c['label']!r}" if c["label"] else c["kind"]
            control.scroll_into_view_if_needed()
            action = change_control(page, control, c["kind"])
            # in a widget with a button, a control usually waits for the button: do not wait long
            changed = settled_change(page, area, before, 5 if buttons else CHANGE_TIMEOUT)
        pressed = None
        if not changed and buttons:
            button = area.locator(f'[data-distlab-control="{buttons[0]["id"]}"]')
            pressed = button.inner_text().strip()
            button.scroll_into_view_if_needed()
            button.click()
            changed = settled_change(page, area, before, ACTION_TIMEOUT)
            action = (action + ", then " if action else "") + f"pressed {pressed!r}"
        if k == 0:
            area.screenshot(path=str(shots.with_name(f"{shots.name}-cell{cell_index:02d}-after.png")))
        if not changed:
            problems.append(f"cell {cell_index}: {label} ({action}) did not change what the widget "
                            f"shows (its pictures, or its text when it has none)")
        elif pressed is not None:
            others = len(controls) - 1
            done.append(f"cell {cell_index}: {label}: {action}: display changed"
                        + (f"; the other {others} control(s) are inputs of {pressed!r}, not checked "
                           f"one by one" if others else ""))
            break
        else:
            done.append(f"cell {cell_index}: {label}: {action}: display changed")
    problems += [f"cell {cell_index}: after the interactions the widget shows {marker!r}"
                 for marker in ("Traceback", *NOT_RENDERED) if marker in display_of(page, area)["text"]]
    return problems, done




def new_page(browser):
    """A fresh browser context at a laptop's size, collecting the page's JavaScript errors."""
    context = browser.new_context(viewport=LAPTOP, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.js_errors, page.console_errors = [], []
    page.on("pageerror", lambda e: page.js_errors.append(str(e)))
    page.on("console", lambda m: page.console_errors.append(m.text) if m.type == "error" else None)
    return context, page


def check_lesson(page, server, notebook: str, artifacts: Path) -> list[str]:
    """Open ``notebook`` in a fresh copy, Run All, compare, look, move every control.

    Returns the report lines; raises AssertionError listing every problem.
    """
    stem = Path(notebook).stem
    for old in [*artifacts.glob(f"{stem}-*"), artifacts / f"{stem}.ipynb"]:
        old.unlink(missing_ok=True)          # no screenshot of an earlier run left to mislead
    timings = {}
    t0 = time.monotonic()

    assert not server.shut_down_kernels(), "kernels of an earlier lesson are still running"
    nb_source = server.fresh_copy(notebook)
    stored = nbformat.read(server.source / notebook, as_version=4)
    open_notebook(page, server, notebook)
    timings["open"] = time.monotonic() - t0

    t = time.monotonic()
    run_all(page)
    timings["run all"] = time.monotonic() - t

    saved = save(page, server.root / notebook)
    nbformat.write(saved, artifacts / f"{stem}.ipynb")
    cells = page.evaluate(JS_CELLS)
    screenshot_notebook(page, artifacts / f"{stem}-after-run.png")
    problems = find_problems(nb_source, saved, cells)
    compared = differences(stored, saved)
    problems += [f"not the stored output (as nbval compares): {d}" for d in compared]

    # interactive widgets: every cell output that holds a control
    t = time.monotonic()
    visible_height, _ = page.evaluate(JS_VISIBLE_HEIGHT)
    done = [f"outputs compared with the stored ones as nbval does: "
            f"{'equal' if not compared else f'{len(compared)} cells differ'}"]
    areas = page.locator(".jp-NotebookPanel .jp-Cell")
    selector = ", ".join([*CONTROLS.values(), ACTION_BUTTONS])
    for i in range(areas.count()):
        area = areas.nth(i).locator(".jp-Cell-outputArea")
        if not area.count() or not area.locator(selector).count():
            continue
        height = page.evaluate(JS_CONTROLS_HEIGHT, [area.element_handle(), selector])
        if height > visible_height:
            problems.append(f"cell {i}: the interactive widget is {height:.0f} px tall, taller than the "
                            f"{visible_height} px of notebook visible on a {LAPTOP['width']}x"
                            f"{LAPTOP['height']} screen: its controls and picture cannot be seen together")
        p, d = check_interactions(page, i, area, artifacts / stem)
        problems += p
        done += d
    timings["interactions"] = time.monotonic() - t
    screenshot_notebook(page, artifacts / f"{stem}-after-interaction.png")
    log = kernel_log(page)
    if re.search(r"Traceback|Error\b", log):
        problems.append(f"the kernel reported errors outside any cell (widget callbacks?):\n{log[-1500:]}")
    elif log:
        done.append(f"kernel log (outside any cell): {log[-500:]}")

    problems += [f"JavaScript error on the page: {e}" for e in page.js_errors]
    timings["total"] = time.monotonic() - t0
    report = [f"{stem}: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())] + done
    # for the reader of the report only: JupyterLab logs some harmless errors of its own
    console = [f"browser console error: {e[:300]}" for e in page.console_errors]
    (artifacts / f"{stem}-report.txt").write_text("\n".join(report + problems + console) + "\n")
    assert not problems, f"{notebook}:\n  " + "\n  ".join(problems)
    return report
