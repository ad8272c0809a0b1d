"""``RemoteWebShop``: the same ``TextEnv`` over HTTP to a running WebShop site (``python -m web_agent_site.app``).

The site serves HTML; this client does what WebShop's own text env does with it: it reads the page's visible
texts, buttons, product links and option radios (``get_available_actions``), searches by POSTing the search
form, and clicks by following the button's form action, the link's href or the radio's ``data-url``. A session
id ``fixed-<nonce>_<i>`` makes the site load goal ``i`` (``app.py`` ``index``). Only the standard library is used.

Start-up: the constructor fetches a probe page, so an unreachable URL or a server that is not WebShop fails when
the benchmark is built, with the URL in the message, not in the middle of a run.
"""
from __future__ import annotations

import re
import secrets
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser

from envs.base import Observation, StepResult, Task, TextEnv
from envs.webshop.pages import BUY_NOW, Page, action_error, split_action, step_outcome


class RemoteWebShopError(RuntimeError):
    """The WebShop server could not be reached or answered with something unusable."""


@dataclass(frozen=True)
class RemoteGoal:
    index: int  # the goal's position in the site's (seed-233 shuffled) goal list


@dataclass
class _Scraped:
    page: Page
    targets: dict[str, tuple[str, str]]  # clickable -> (method, url)
    search_action: str | None
    instruction: str
    score: float | None
    category: str | None


class _PageParser(HTMLParser):
    """Collects what WebShop's text env reads from a page (``convert_html_to_text`` and ``get_available_actions``)."""

    _HIDDEN = {"style", "script", "head", "title", "meta"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts, self.instruction_texts = [], []
        self.buttons, self.links, self.radios = [], [], []
        self.search_action = None
        self.stack: list[tuple[str, dict]] = []
        self.form_action = None
        self.capture: tuple[str, str, list] | None = None  # (kind, target url, text parts) of a button or link
        self.ids: dict[str, list[str]] = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.form_action = attrs.get("action")
        elif tag == "input" and attrs.get("id") == "search_input":
            self.search_action = self.form_action
        elif tag == "input" and attrs.get("type") == "radio":
            self.radios.append((attrs.get("value", ""), attrs.get("data-url", "")))
        elif tag == "button":
            self.capture = ("POST", self.form_action or "", [])
        elif tag == "a" and "product-link" in (attrs.get("class") or "").split():
            self.capture = ("GET", attrs.get("href", ""), [])
        if tag not in ("input", "br", "img", "link", "meta"):
            self.stack.append((tag, attrs))

    def handle_endtag(self, tag):
        if self.capture and tag in ("button", "a"):
            method, url, parts = self.capture
            name = " ".join("".join(parts).split())
            (self.buttons if method == "POST" else self.links).append((name, method, url))
            self.capture = None
        if tag == "form":
            self.form_action = None
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if self.capture:
            self.capture[2].append(data)
        text = data.strip()
        if not text or any(tag in self._HIDDEN for tag, _ in self.stack):
            return
        for _, attrs in self.stack:
            if attrs.get("id"):
                self.ids.setdefault(attrs["id"], []).append(text)
        if any(attrs.get("id") == "instruction-text" for _, attrs in self.stack):
            self.instruction_texts.append(text)
        else:
            self.texts.append(text)


def _instruction(parts: list[str]) -> str:
    for i, text in enumerate(parts):
        if text.startswith("Instruction:"):
            rest = text[len("Instruction:"):].strip()
            return rest or (parts[i + 1] if i + 1 < len(parts) else "")
    return ""


def scrape(html: str, base_url: str) -> _Scraped:
    """Turn one WebShop HTML page into the text env's view of it."""
    parser = _PageParser()
    parser.feed(html)
    targets: dict[str, tuple[str, str]] = {}
    for name, method, url in parser.buttons + parser.links:
        targets.setdefault(name.lower(), (method, urllib.parse.urljoin(base_url, url)))
    for value, url in parser.radios:
        targets.setdefault(value, ("GET", urllib.parse.urljoin(base_url, url)))
    score_text = parser.ids.get("reward", [])
    score = None
    if score_text:
        match = re.search(r"-?\d+(\.\d+)?", score_text[-1])
        score = float(match.group()) if match else 0.0
    if score is not None:
        kind = "done"
    elif parser.search_action is not None:
        kind = "search"
    elif parser.radios or BUY_NOW.lower() in targets:
        kind = "item"
    elif parser.links or "next >" in targets:
        kind = "results"
    else:
        kind = "detail"
    category = (parser.ids.get("goal-category") or [None])[-1]
    page = Page(kind, tuple(parser.texts), tuple(targets), parser.search_action is not None)
    return _Scraped(page, targets, parser.search_action, _instruction(parser.instruction_texts), score,
                    category.removeprefix("category").strip() if category else None)


class RemoteWebShop(TextEnv):
    def __init__(self, url: str, timeout_s: float = 10.0, max_steps: int = 15, probe: bool = True):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise RemoteWebShopError(f"webshop.url must be an http(s) URL such as http://127.0.0.1:3000, got {url!r}")
        self.url, self.timeout_s, self.max_steps = url.rstrip("/"), timeout_s, max_steps
        self.current: _Scraped | None = None
        self.task: Task | None = None
        self.instruction = ""
        self.steps, self.done = 0, True
        if probe:
            self.probe()

    def probe(self) -> None:
        """Fail now, with a clear message, if the site is unreachable or is not a WebShop site."""
        html, _ = self._request("GET", f"{self.url}/fixed-probe{secrets.token_hex(4)}_0")
        if 'id="search_input"' not in html:
            raise RemoteWebShopError(f"{self.url} answered, but not with a WebShop search page (no search_input); "
                                     "check webshop.url points at `python -m web_agent_site.app`")

    def _request(self, method: str, url: str, form: dict | None = None) -> tuple[str, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(url, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read().decode("utf-8", errors="replace"), response.geturl()
        except urllib.error.HTTPError as err:
            raise RemoteWebShopError(f"WebShop server error: {method} {url} answered HTTP {err.code} "
                                     f"{err.reason}") from err
        except (socket.timeout, TimeoutError) as err:
            raise RemoteWebShopError(f"WebShop server timed out after {self.timeout_s:g}s on {method} {url}; "
                                     "raise webshop.request_timeout_s or check the server") from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, (socket.timeout, TimeoutError)):
                raise RemoteWebShopError(f"WebShop server timed out after {self.timeout_s:g}s on {method} {url}; "
                                         "raise webshop.request_timeout_s or check the server") from err
            raise RemoteWebShopError(f"cannot reach the WebShop server at {self.url} ({err.reason}); start it "
                                     "(python -m web_agent_site.app) or fix webshop.url") from err

    def _load(self, method: str, url: str, form: dict | None = None) -> None:
        html, final_url = self._request(method, url, form)
        self.current = scrape(html, final_url)

    def reset(self, task: Task) -> Observation:
        if not isinstance(task.payload, RemoteGoal):
            raise TypeError(f"task {task.task_id!r} is not a remote WebShop goal; take tasks from the benchmark's "
                            "panel built with webshop.url set")
        self.task, self.steps, self.done = task, 0, False
        self._load("GET", f"{self.url}/fixed-{secrets.token_hex(6)}_{task.payload.index}")
        self.instruction = self.current.instruction
        if not self.instruction:
            raise RemoteWebShopError(f"{self.url} sent no instruction for goal {task.payload.index}; is it WebShop?")
        return self._observation()

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) first")
        self.steps += 1
        error = action_error(self.current.page, action)
        if error is None:
            verb, arg = split_action(action)
            if verb == "search":
                self._load("POST", urllib.parse.urljoin(self.url + "/", self.current.search_action or ""),
                           {"search_query": arg})
            elif arg != "search":  # WebShop's text env ignores its search button
                self._load(*self.current.targets[arg])
        reward, self.done, info = step_outcome(self.current.score, self.steps, self.max_steps, error,
                                               self.current.category or self.task.task_type)
        return StepResult(self._observation(), reward, self.done, info)

    def _observation(self) -> Observation:
        page = self.current.page
        info = {"page": page.kind, "instruction": self.instruction}
        return Observation(page.text, page.admissible_actions, info)
