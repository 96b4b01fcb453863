// x402's TypeScript client, from npm and unmodified, paying Engram through a payment channel:
// @x402/fetch's wrapFetchWithPayment with @x402/evm's batch-settlement client scheme.
// Run by tests/payments/test_npm_client.py, which serves Engram and counts the chain's
// transactions. Environment: ENGRAM_URL, RPC_URL, PAYER_KEY (0x hex), NETWORK (CAIP-2), CALLS.
// Prints one JSON line per paid call: its status, the receipt's transaction (the deposit's, or
// "" for a voucher) and the channel's charged total.
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { toClientEvmSigner } from "@x402/evm";
import { BatchSettlementEvmScheme } from "@x402/evm/batch-settlement/client";
import { createPublicClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";

const { ENGRAM_URL, RPC_URL, PAYER_KEY, NETWORK, CALLS } = process.env;

const account = privateKeyToAccount(PAYER_KEY);
// The public client lets the scheme read the channel's on-chain balance, as a stock setup does.
const signer = toClientEvmSigner(account, createPublicClient({ transport: http(RPC_URL) }));
const client = new x402Client().register(NETWORK, new BatchSettlementEvmScheme(signer));
const pay = wrapFetchWithPayment(fetch, client);

for (let call = 1; call <= Number(CALLS); call++) {
  const response = await pay(`${ENGRAM_URL}/v1/store`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ content: `npm client memory ${call} ${crypto.randomUUID()}` }),
  });
  const raw = response.headers.get("PAYMENT-RESPONSE");
  const receipt = raw ? decodePaymentResponseHeader(raw) : null;
  console.log(
    JSON.stringify({
      call,
      status: response.status,
      body: response.status === 201 ? undefined : await response.text(),
      transaction: receipt?.transaction ?? null,
      charged: receipt?.extra?.channelState?.chargedCumulativeAmount ?? null,
      chargedAmount: receipt?.extra?.chargedAmount ?? null,
    }),
  );
  if (response.status !== 201) process.exit(1);
}
