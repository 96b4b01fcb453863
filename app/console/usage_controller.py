"""The console's usage page: calls per day and route, USDC paid, and the receipts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from litestar import get
from litestar.di import NamedDependency
from litestar.response import Template

from app.console.pages import PageController, Session, render
from app.http.params import Conn
from app.payments import repository as payments
from app.usage.service import UsageService, report_days

USAGE_DAYS = 30
RECEIPTS = 50


class ConsoleUsageController(PageController):
    """Usage and receipts."""

    @get("/usage")
    async def usage(
        self, conn: Conn, session: Session, usage_service: NamedDependency[UsageService]
    ) -> Template:
        today = datetime.now(UTC).date()
        first, last = report_days(str(today - timedelta(days=USAGE_DAYS - 1)), str(today), "day")
        report = await usage_service.report(conn, session.wallet, first, last, "day")
        receipts, total = await payments.list_for_wallet(conn, session.wallet, RECEIPTS, 0)
        chart = {
            "days": [d.day for d in report.days],
            "endpoints": sorted({e for d in report.days for e in d.calls}),
            "calls": [d.calls for d in report.days],
            "paid_usdc": [d.paid_usdc for d in report.days],
        }
        receipts = [(r, usage_service.usdc(Decimal(r["amount"]))) for r in receipts]
        return render("usage.html", session, report=report, chart=chart, receipts=receipts,
                    receipts_total=total, first=first, last=last)  # fmt: skip
