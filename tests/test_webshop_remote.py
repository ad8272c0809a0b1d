"""RemoteWebShop against a small stub of WebShop's Flask site (its HTML structure) on 127.0.0.1."""
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from envs.base import make_benchmark
from envs.webshop import RemoteWebShop, RemoteWebShopError
from tests.profiles import profile_config

INSTRUCTION = "i need a cotton t-shirt with size: large, and price lower than 30.00 dollars"
ASIN = "B0TEST0001"


def _head(sid: str, search: bool = False) -> str:
    instruction = f"<h4>Instruction: <br>{INSTRUCTION}</h4>" if search else f"<h4>Instruction: {INSTRUCTION}</h4>"
    return (f'<html><head><title>WebShop</title><script>var x = "hidden";</script></head><body>'
            f'<div id="logo"><h2>WebShop</h2></div><div id="instruction-text">{instruction}</div>'
            f'<form method="post" action="/{sid}"><button type="submit" class="btn btn-success">'
            f'{"Search" if search else "Back to Search"}</button>'
            + ('<input id="search_input" type="text" name="search_query"/>' if search else "") + "</form>")


def search_page(sid):
    return _head(sid, search=True) + "</body></html>"


def results_page(sid, keywords):
    item = urllib.parse.quote(f"/item_page/{sid}/{ASIN}/{keywords}/1/{{}}")
    return (_head(sid) + '<p>Page 1 (1-10) of 1 total results</p><div class="grid-item">'
            f'<h4><a class="product-link" href="{item}">{ASIN}</a></h4><h4>Nordvik Cotton T-Shirt</h4>'
            "<h5>$19.99</h5></div></body></html>")


def item_page(sid, options: str):
    radios = "".join(
        f'<input type="radio" id="radio_size{i}" name="size" value="{v}" '
        f'data-url="{urllib.parse.quote(f"/item_page/{sid}/{ASIN}/kw/1/" + str({"size": v}))}">'
        f'<label for="radio_size{i}">{v}</label>' for i, v in enumerate(["small", "large"]))
    done = urllib.parse.quote(f"/done/{sid}/{ASIN}/{options}")
    return (_head(sid) + f'<form method="post" action="/search_results/{sid}/kw/1">'
            f'<button type="submit" class="btn btn-primary">&lt; Prev</button></form><h4>size</h4>{radios}'
            f'<h2>Nordvik Cotton T-Shirt</h2><h4>Price: $19.99</h4><form method="post" action="{done}">'
            '<button type="submit" class="btn btn-lg purchase">Buy Now</button></form></body></html>')


def done_page(options: str):
    reward = 1.0 if "large" in options else 0.5
    return ('<html><body><h1>Thank you for shopping with us!</h1><div style="display:none">'
            '<h4 id="goal-category">category<pre>fashion</pre></h4></div>'
            f'<h3 id="reward">Your score (min 0.0, max 1.0)<pre>{reward}</pre></h3></body></html>')


class StubSite(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body="", location=None):
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body.encode())

    def _route(self, method):
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        path = urllib.parse.unquote(self.path)
        server.requests.append((method, path, body))
        time.sleep(server.delay)
        if server.fail_status:
            return self._send(server.fail_status, "boom")
        parts = path.strip("/").split("/")
        if server.not_webshop:
            return self._send(200, "<html><body>hello</body></html>")
        if len(parts) == 1 and method == "POST":
            keywords = urllib.parse.parse_qs(body)["search_query"][0].split(" ")
            return self._send(302, location=f"/search_results/{parts[0]}/{keywords}/1")
        if len(parts) == 1:
            return self._send(200, search_page(parts[0]))
        if parts[0] == "search_results":
            return self._send(200, results_page(parts[1], parts[2]))
        if parts[0] == "item_page":
            return self._send(200, item_page(parts[1], parts[-1]))
        if parts[0] == "done":
            return self._send(200, done_page(parts[-1]))
        return self._send(404, "not found")

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # the timeout test hangs up before the stub answers; that broken pipe is expected


@pytest.fixture
def site():
    server = QuietServer(("127.0.0.1", 0), StubSite)
    server.daemon_threads, server.block_on_close = True, False
    server.requests, server.delay, server.fail_status, server.not_webshop = [], 0.0, None, False
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def remote_task(url, index=7):
    return make_benchmark("webshop", profile_config("tiny", "webshop", url=url)).panel("eval_out").tasks[index]


def test_episode_and_request_format(site):
    server, url = site
    env = RemoteWebShop(url, timeout_s=5)
    task = remote_task(url)
    server.requests.clear()
    obs = env.reset(task)
    method, path, _ = server.requests[-1]
    assert method == "GET" and path.startswith("/fixed-") and path.endswith("_7")
    session = path.strip("/")
    assert obs.info["instruction"] == INSTRUCTION and obs.info["page"] == "search"
    assert obs.admissible_actions == ["search[<your query>]", "click[search]"]

    obs = env.step("search[Cotton T-Shirt]").observation
    assert server.requests[-2] == ("POST", f"/{session}", "search_query=cotton+t-shirt")
    assert server.requests[-1][0] == "GET" and server.requests[-1][1].startswith(f"/search_results/{session}/")
    assert obs.info["page"] == "results" and f"click[{ASIN.lower()}]" in obs.admissible_actions
    assert "'Back to Search'" in obs.text and "hidden" not in obs.text and INSTRUCTION not in obs.text

    obs = env.step(f"click[{ASIN.lower()}]").observation
    assert server.requests[-1][:2] == ("GET", f"/item_page/{session}/{ASIN}/['cotton', 't-shirt']/1/{{}}")
    assert obs.admissible_actions == ["click[back to search]", "click[< prev]", "click[buy now]", "click[small]",
                                      "click[large]"]
    env.step("click[large]")
    assert server.requests[-1][1].endswith("{'size': 'large'}")
    result = env.step("click[buy now]")
    assert server.requests[-1][0] == "POST" and server.requests[-1][1].startswith(f"/done/{session}/{ASIN}/")
    assert result.done and result.reward == 10.0
    assert result.info == {"won": True, "action_valid": True, "task_type": "fashion", "task_score": 1.0,
                           "truncated": False}


def test_invalid_action_sends_nothing(site):
    server, url = site
    env = RemoteWebShop(url)
    obs = env.reset(remote_task(url))
    count = len(server.requests)
    for junk in ("click[nonexistent]", "search[]", "buy", "x" * 10240):
        result = env.step(junk)
        assert result.info["action_valid"] is False and result.observation.text == obs.text
    assert len(server.requests) == count


def test_unreachable_url_fails_at_start_up():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    with pytest.raises(RemoteWebShopError, match=f"cannot reach the WebShop server at http://127.0.0.1:{port}"):
        make_benchmark("webshop", profile_config("tiny", "webshop", url=f"http://127.0.0.1:{port}"))


def test_timeout_is_a_clear_error(site):
    server, url = site
    server.delay = 1.0
    with pytest.raises(RemoteWebShopError, match=r"timed out after 0.2s .*request_timeout_s"):
        RemoteWebShop(url, timeout_s=0.2)


def test_server_error_is_a_clear_error(site):
    server, url = site
    env = RemoteWebShop(url)
    env.reset(remote_task(url))
    server.fail_status = 500
    with pytest.raises(RemoteWebShopError, match=r"WebShop server error: POST .* HTTP 500"):
        env.step("search[shirt]")


def test_not_a_webshop_site_and_bad_url(site):
    server, url = site
    server.not_webshop = True
    with pytest.raises(RemoteWebShopError, match="not with a WebShop search page"):
        RemoteWebShop(url)
    with pytest.raises(RemoteWebShopError, match="http"):
        RemoteWebShop("localhost:3000")


def test_remote_panels_and_no_expert(site):
    _, url = site
    bench = make_benchmark("webshop", profile_config("paper", "webshop", url=url))
    assert bench.panel("eval_out").task_ids[:2] == ("webshop-remote-00000", "webshop-remote-00001")
    assert len(bench.panel("eval_out")) == 500 and bench.panel("train").task_ids[0] == "webshop-remote-00500"
    with pytest.raises(NotImplementedError, match="offline catalogue"):
        bench.expert(bench.panel("train").tasks[0])
