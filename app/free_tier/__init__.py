"""The free tier: each wallet's free calls, metered before any x402 payment is asked for."""
