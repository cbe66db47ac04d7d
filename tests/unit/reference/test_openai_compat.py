"""The reference chatbot's OpenAI-compatible endpoints go through evalkit's one HTTP stack
(issue 37 item 4): net's retry policy (a 5xx retried, Retry-After honoured, a 4xx or 501
not), net's byte cap, and net's deadline. Before, they used a second, synchronous httpx
client with no cap and no retry that read the proxy environment on its own. respx answers
at httpcore's layer, under net's transport, so the real stack runs."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import respx
import tenacity

from evalkit.net.retry import RetryPolicy
from evalkit.reference.openai_compat import BackendError, ChatClient, EmbeddingsClient

CHAT_URL = "http://llm.test/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def _reply(text: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": text}}]})


@pytest.fixture
def waits() -> list[float]:
    return []


@pytest.fixture
def chat(waits: list[float]) -> Iterator[ChatClient]:
    async def record(seconds: float) -> None:
        waits.append(seconds)

    # no backoff of our own (wait_none); a server's Retry-After still decides, recorded, not slept
    policy = RetryPolicy(attempts=3, wait=tenacity.wait_none(), sleep=record)
    client = ChatClient("http://llm.test/v1", "tiny-chat", None, 5.0, retry_policy=policy, max_response_bytes=1000)
    yield client
    client.close()


def test_a_5xx_then_a_200_is_retried_and_answers(chat: ChatClient, waits: list[float]) -> None:
    with respx.mock(assert_all_called=True) as router:
        route = router.post(CHAT_URL).mock(
            side_effect=[httpx.Response(503, text="busy", headers={"Retry-After": "7"}), _reply("fine")]
        )
        assert chat.complete(MESSAGES) == "fine"
    assert route.call_count == 2
    assert waits == [7.0]  # the server's Retry-After, as net.retry honours it for targets and judges


def test_a_5xx_every_time_fails_after_the_policys_tries(chat: ChatClient) -> None:
    with respx.mock() as router:
        route = router.post(CHAT_URL).mock(return_value=httpx.Response(502, text="down"))
        with pytest.raises(BackendError, match="HTTP 502: down"):
            chat.complete(MESSAGES)
    assert route.call_count == 3  # attempts=3: the first try and two retries, then the last status


@pytest.mark.parametrize("status", [400, 401, 501])
def test_a_client_error_or_501_is_not_retried(chat: ChatClient, status: int) -> None:
    with respx.mock() as router:
        route = router.post(CHAT_URL).mock(return_value=httpx.Response(status, text="no"))
        with pytest.raises(BackendError, match=f"HTTP {status}"):
            chat.complete(MESSAGES)
    assert route.call_count == 1


def test_a_body_over_the_byte_cap_is_refused_and_not_retried(chat: ChatClient) -> None:
    big = _reply("x" * 2000)  # over max_response_bytes=1000
    with respx.mock() as router:
        route = router.post(CHAT_URL).mock(return_value=big)
        with pytest.raises(BackendError, match="over the 1000-byte limit"):
            chat.complete(MESSAGES)
    assert route.call_count == 1  # the same request gets the same answer (net.retry)


def test_a_connection_error_is_retried(chat: ChatClient) -> None:
    with respx.mock() as router:
        route = router.post(CHAT_URL).mock(side_effect=[httpx.ConnectError("refused"), _reply("back")])
        assert chat.complete(MESSAGES) == "back"
    assert route.call_count == 2


def test_embeddings_go_through_the_same_stack_and_close_reopens() -> None:
    client = EmbeddingsClient("http://emb.test/v1", "e", "key", 5.0, batch_size=2, retry_policy=RetryPolicy.no_wait())
    vectors = {"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}]}
    with respx.mock(assert_all_called=True) as router:
        route = router.post("http://emb.test/v1/embeddings").mock(return_value=httpx.Response(200, json=vectors))
        assert client.embed(["a", "b"]) == [[1.0, 0.0], [0.0, 1.0]]  # ordered by "index"
        client.close()
        assert client.embed(["c", "d"]) == [[1.0, 0.0], [0.0, 1.0]]  # a closed client starts again
        client.close()
    assert route.call_count == 2
    assert route.calls[0].request.headers["Authorization"] == "Bearer key"
