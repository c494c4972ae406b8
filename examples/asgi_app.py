"""docs/guides/asgi.md's FastAPI app: orders created at most once per Idempotency-Key and client.

    pip install 'hivenet-db[asgi]' fastapi uvicorn
    HIVENET_URL=postgresql+psycopg://app@localhost/shop uvicorn asgi_app:app

``POST /orders`` (shape b) inserts the order on the middleware's connection: the row and the
recorded response commit together. ``POST /notify`` (shape a) calls something outside the
database; the middleware committed ``processing`` before it ran.

The login is the application's (granted hivenet_app only), so the middleware does not set the
namespace's retention (``set_request_retention`` is hivenet_admin's): an administrator does,
``SELECT hivenet.set_request_retention('shop', '2 days')`` (docs/guides/asgi.md, Retention).
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Response
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from starlette.requests import Request

from hivenet_db.asgi import IdempotencyMiddleware, idempotency_connection

sent: list[str] = []  # what /notify "sent" (a remote call in a real application)


def client_of(request: Request) -> str:
    """The authenticated client; here a header, in a real app the verified token's subject."""
    return request.headers.get("x-client", "anonymous")


def create_app(engine: AsyncEngine) -> FastAPI:
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, engine=engine, namespace="shop",
                       scope=client_of)

    @app.post("/orders", status_code=201)
    async def create_order(order: dict[str, str], response: Response,
                           conn: Annotated[AsyncConnection, Depends(idempotency_connection)],
                           ) -> dict[str, Any]:
        row = await conn.execute(text("INSERT INTO orders (sku) VALUES (:sku) RETURNING id"),
                                 {"sku": order["sku"]})
        order_id = row.scalar_one()
        response.headers["Location"] = f"/orders/{order_id}"
        return {"order": order_id, "sku": order["sku"]}

    @app.post("/notify", status_code=202)
    async def notify(message: dict[str, str],
                     x_client: Annotated[str, Header()] = "anonymous") -> dict[str, str]:
        sent.append(f"{x_client}: {message['text']}")
        return {"queued": message["text"]}

    return app


if "HIVENET_URL" in os.environ:  # uvicorn asgi_app:app
    app = create_app(create_async_engine(os.environ["HIVENET_URL"]))
