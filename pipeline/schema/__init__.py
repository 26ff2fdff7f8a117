"""The contract: our log record (pydantic) and the warehouse tables (Arrow)."""
