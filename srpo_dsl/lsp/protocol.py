"""Every request is answered: pygls drops a request whose params it cannot read (it logs "Unable to
deserialize message" and sends nothing); here such a request gets an InvalidParams error (-32602) whose
message says, in one line, which field was wrong, and the server goes on."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cattrs.v import transform_error
from lsprotocol import types as lsp
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import RPCMessage

log = logging.getLogger(__name__)
INVALID_PARAMS = -32602


@dataclass(frozen=True)
class Unreadable:
    """A request whose params did not read as its method's: what to answer it with."""

    id: int | str
    method: str
    why: str


def why_unreadable(error: BaseException) -> str:
    """One line: the first few of the fields that did not read, as `what @ $.params.where`."""
    try:
        found = transform_error(error)
    except Exception:  # not a structuring error: its own words
        found = [str(error) or type(error).__name__]
    return "; ".join(found[:3]).replace("\n", " ")


class AnsweringProtocol(LanguageServerProtocol):
    """pygls's protocol, but a request it cannot read is answered with an error."""

    def structure_message(self, data: dict[str, object]) -> RPCMessage | Unreadable:
        try:
            return super().structure_message(data)
        except Exception as error:
            ident = data.get("id") if isinstance(data, dict) else None
            if not (isinstance(data, dict) and "method" in data and isinstance(ident, (int, str))):
                raise
            return Unreadable(ident, str(data["method"]), why_unreadable(error.__cause__ or error))

    def handle_message(self, message: RPCMessage | Unreadable) -> None:
        if not isinstance(message, Unreadable):
            super().handle_message(message)
            return
        log.warning(
            "request %r (%s) answered with InvalidParams: %s", message.id, message.method, message.why
        )
        text = f"invalid params for {message.method}: {message.why}"
        self._send_response(message.id, None, lsp.ResponseError(code=INVALID_PARAMS, message=text))
