"""Generate the "capitals" task: a country → its capital, answered with the city name only. Prompting should do.

    python data/raw/make_capitals.py        # rewrites data/raw/capitals.jsonl
    dvc exp run -S task.name=capitals -S task.train=data/raw/capitals.jsonl -S task.prefs=null

Deterministic. The answers are facts the base model has seen in pre-training or has not: fine-tuning on other
countries' capitals teaches the answer's form, not the missing facts, so a searched prompt (an instruction, a few
solved examples) should match it. Zero-shot, a small chat model tends to answer in a sentence ("The capital of
Peru is Lima."): exact match scores that 0, `contains_reference` 1, and the verdict's knowledge-or-format
diagnosis names it. Countries whose capital is disputed or split are left out.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261130

CAPITALS = {
    "Afghanistan": "Kabul", "Albania": "Tirana", "Algeria": "Algiers", "Andorra": "Andorra la Vella",
    "Angola": "Luanda", "Argentina": "Buenos Aires", "Armenia": "Yerevan", "Australia": "Canberra",
    "Austria": "Vienna", "Azerbaijan": "Baku", "Bahrain": "Manama", "Bangladesh": "Dhaka", "Belarus": "Minsk",
    "Belgium": "Brussels", "Belize": "Belmopan", "Benin": "Porto-Novo", "Bhutan": "Thimphu",
    "Botswana": "Gaborone", "Brazil": "Brasilia", "Bulgaria": "Sofia", "Burkina Faso": "Ouagadougou",
    "Burundi": "Gitega", "Cambodia": "Phnom Penh", "Cameroon": "Yaounde", "Canada": "Ottawa",
    "Chad": "N'Djamena", "Chile": "Santiago", "China": "Beijing", "Colombia": "Bogota", "Costa Rica": "San Jose",
    "Croatia": "Zagreb", "Cuba": "Havana", "Cyprus": "Nicosia", "Czechia": "Prague", "Denmark": "Copenhagen",
    "Djibouti": "Djibouti", "Dominican Republic": "Santo Domingo", "Ecuador": "Quito", "Egypt": "Cairo",
    "El Salvador": "San Salvador", "Eritrea": "Asmara", "Estonia": "Tallinn", "Ethiopia": "Addis Ababa",
    "Fiji": "Suva", "Finland": "Helsinki", "France": "Paris", "Gabon": "Libreville", "Georgia": "Tbilisi",
    "Germany": "Berlin", "Ghana": "Accra", "Greece": "Athens", "Guatemala": "Guatemala City", "Guinea": "Conakry",
    "Guyana": "Georgetown", "Haiti": "Port-au-Prince", "Honduras": "Tegucigalpa", "Hungary": "Budapest",
    "Iceland": "Reykjavik", "India": "New Delhi", "Indonesia": "Jakarta", "Iran": "Tehran", "Iraq": "Baghdad",
    "Ireland": "Dublin", "Italy": "Rome", "Jamaica": "Kingston", "Japan": "Tokyo", "Jordan": "Amman",
    "Kazakhstan": "Astana", "Kenya": "Nairobi", "Kuwait": "Kuwait City", "Kyrgyzstan": "Bishkek",
    "Laos": "Vientiane", "Latvia": "Riga", "Lebanon": "Beirut", "Lesotho": "Maseru", "Liberia": "Monrovia",
    "Libya": "Tripoli", "Liechtenstein": "Vaduz", "Lithuania": "Vilnius", "Luxembourg": "Luxembourg",
    "Madagascar": "Antananarivo", "Malawi": "Lilongwe", "Malaysia": "Kuala Lumpur", "Maldives": "Male",
    "Mali": "Bamako", "Malta": "Valletta", "Mauritania": "Nouakchott", "Mauritius": "Port Louis",
    "Mexico": "Mexico City", "Moldova": "Chisinau", "Monaco": "Monaco", "Mongolia": "Ulaanbaatar",
    "Montenegro": "Podgorica", "Morocco": "Rabat", "Mozambique": "Maputo", "Myanmar": "Naypyidaw",
    "Namibia": "Windhoek", "Nepal": "Kathmandu", "New Zealand": "Wellington", "Nicaragua": "Managua",
    "Niger": "Niamey", "Nigeria": "Abuja", "North Korea": "Pyongyang", "North Macedonia": "Skopje",
    "Norway": "Oslo", "Oman": "Muscat", "Pakistan": "Islamabad", "Panama": "Panama City",
    "Papua New Guinea": "Port Moresby", "Paraguay": "Asuncion", "Peru": "Lima", "Philippines": "Manila",
    "Poland": "Warsaw", "Portugal": "Lisbon", "Qatar": "Doha", "Romania": "Bucharest", "Russia": "Moscow",
    "Rwanda": "Kigali", "Saudi Arabia": "Riyadh", "Senegal": "Dakar", "Serbia": "Belgrade",
    "Sierra Leone": "Freetown", "Singapore": "Singapore", "Slovakia": "Bratislava", "Slovenia": "Ljubljana",
    "Somalia": "Mogadishu", "South Korea": "Seoul", "South Sudan": "Juba", "Spain": "Madrid",
    "Sudan": "Khartoum", "Suriname": "Paramaribo", "Sweden": "Stockholm", "Syria": "Damascus",
    "Taiwan": "Taipei", "Tajikistan": "Dushanbe", "Tanzania": "Dodoma", "Thailand": "Bangkok", "Togo": "Lome",
    "Tunisia": "Tunis", "Turkey": "Ankara", "Turkmenistan": "Ashgabat", "Uganda": "Kampala", "Ukraine": "Kyiv",
    "United Arab Emirates": "Abu Dhabi", "United Kingdom": "London", "United States": "Washington, D.C.",
    "Uruguay": "Montevideo", "Uzbekistan": "Tashkent", "Venezuela": "Caracas", "Vietnam": "Hanoi",
    "Yemen": "Sanaa", "Zambia": "Lusaka", "Zimbabwe": "Harare",
}
PROMPTS = ["What is the capital of {c}?", "Which city is the capital of {c}?", "Name the capital city of {c}."]


def main() -> None:
    rng = random.Random(SEED)
    countries = sorted(CAPITALS)
    rng.shuffle(countries)
    rows = [{"prompt": rng.choice(PROMPTS).format(c=c), "completion": CAPITALS[c]} for c in countries]
    with open(HERE / "capitals.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {len(rows)} countries to {HERE / 'capitals.jsonl'}")


if __name__ == "__main__":
    main()
