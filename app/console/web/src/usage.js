// The usage charts (Chart.js): metered calls per day stacked by endpoint, and USDC paid per day.
import Chart from "chart.js/auto";
import { pageData } from "./lib/http.js";

const COLOURS = ["#3b6ea5", "#d9822b", "#4c9a6a", "#a5473b", "#7b5ea7", "#8c8c2e", "#2e8c8c", "#b5649b"];

document.addEventListener("DOMContentLoaded", () => {
  const data = pageData("usage-data");
  if (!data) return;
  const calls = document.getElementById("calls-chart");
  const paid = document.getElementById("paid-chart");
  const callsChart = new Chart(calls, {
    type: "bar",
    data: {
      labels: data.days,
      datasets: data.endpoints.map((endpoint, i) => ({
        label: endpoint,
        data: data.calls.map((day) => day[endpoint] || 0),
        backgroundColor: COLOURS[i % COLOURS.length],
      })),
    },
    options: { animation: false, responsive: true, scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } } },
  });
  const paidChart = new Chart(paid, {
    type: "bar",
    data: {
      labels: data.days,
      datasets: [{ label: "USDC", data: data.paid_usdc.map(Number), backgroundColor: COLOURS[2] }],
    },
    options: { animation: false, responsive: true, scales: { y: { beginAtZero: true } } },
  });
  // what the charts drew, for whoever checks them (the browser tests)
  calls.dataset.total = String(callsChart.data.datasets.reduce((sum, d) => sum + d.data.reduce((a, b) => a + b, 0), 0));
  paid.dataset.total = String(paidChart.data.datasets[0].data.reduce((a, b) => a + b, 0));
});
