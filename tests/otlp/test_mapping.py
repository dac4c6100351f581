"""The mapping and the decoder are pure: they import without Django (STYLE §1), and a span
about nothing the loop uses costs no dictionary of its attributes."""

from __future__ import annotations

import subprocess
import sys

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otlp import mapping


def test_mapping_and_decoder_import_without_django():
    code = (
        "import sys; import otlp.mapping, otlp.decode;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'feedback', 'celery'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def span(parent: bytes = b"\x01" * 8, **attrs) -> Span:
    s = Span(trace_id=b"\x02" * 16, span_id=b"\x03" * 8, parent_span_id=parent)
    for key, value in attrs.items():
        kv = s.attributes.add()
        kv.key = key
        kv.value.string_value = value
    return s


def test_a_span_about_nothing_the_loop_uses_is_skipped():
    assert mapping.extract(span(**{"tool.name": "search", "input.value": "x"}), {}) is None


def test_a_root_span_is_kept_for_its_session_id_and_outcome():
    facts = mapping.extract(span(parent=b"", **{"session.id": "s-1"}), {})
    assert facts is not None and facts.is_root and not facts.relevant
    assert facts.session_id == "s-1"


def test_genai_retrieval_and_chat_spans_are_read():
    retrieval = mapping.extract(
        span(
            **{
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.documents": '[{"id": "a", "score": 0.5, "content": "12345678"}]',
            }
        ),
        {},
    )
    assert retrieval.docs == (mapping.Doc(("a",), 0.5, 2),)
    chat = mapping.extract(
        span(
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.output.messages": '[{"role": "assistant", "parts": '
                '[{"type": "text", "content": "hello"}]}]',
            }
        ),
        {},
    )
    assert chat.output == "hello"


def test_an_unknown_signal_type_is_an_error_not_a_signal():
    facts = mapping.extract(span(**{"rms.signal.abc": "IGNORED_REPEATEDLY"}), {})
    assert facts.signals == () and facts.errors == ("invalid_signal",)
