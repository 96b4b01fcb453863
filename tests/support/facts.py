"""Realistic memory texts: FACTS, unrelated enough that store's dedup never merges them, and
a near-duplicate pair that it does merge."""

FACTS = [
    "The user prefers dark mode in every code editor",
    "Deploys to production happen on Tuesdays after the standup",
    "Alice is allergic to peanuts and shellfish",
    "The staging database runs PostgreSQL 16 on a single node",
    "Quarterly revenue grew twelve percent over last year",
    "Bob's birthday is on the fourteenth of March",
    "The team decided to use Litestar instead of FastAPI",
    "Our office wifi password rotates every ninety days",
    "The cat is named Miso and eats salmon kibble",
    "Use tabs, not spaces, in the legacy Makefile",
    "The marathon training plan peaks at thirty-two kilometres",
    "Invoices are due within thirty days of receipt",
    "Grandma's lasagna recipe uses nutmeg in the bechamel",
    "The VPN disconnects when the laptop sleeps",
    "Kubernetes pods are limited to two gigabytes of memory",
    "The user is learning Japanese and studies kanji each morning",
    "Flight to Lisbon departs at 7:40 from terminal two",
    "Avoid scheduling meetings on Friday afternoons",
    "The garden tomatoes need watering every second day",
    "Customer churn dropped after the onboarding redesign",
    "The API rate limit is one hundred requests per minute",
    "Her favourite novel is One Hundred Years of Solitude",
    "The bike's rear tyre pressure should be 80 psi",
    "Backups are encrypted with age and stored in object storage",
    "The project codename for the mobile app is Heron",
    "He drinks oat milk flat whites without sugar",
    "The thermostat schedule lowers heat to 17 degrees at night",
    "Security reviews are required for every new dependency",
    "The piano lesson moved to Wednesday at five",
    "Sales tax in the region is eight and a quarter percent",
]

# The same words and a full stop: above store's dedup similarity with the local embedder.
ALLERGY = "Alice is allergic to peanuts"
ALLERGY_AGAIN = "Alice is allergic to peanuts."
