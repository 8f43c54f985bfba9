"""A visitor is an address or an account (issue 42, items 1 and 2): the queue's places per visitor and per tab,
lanes served by visitor in turn, and each visitor's tabs bounded (the oldest idle first, never a live one)."""

from __future__ import annotations

from playground.app import visitors
from playground.app.visitors import Place, QueuePlaces, Tabs, fair_order, key


def test_one_address_never_holds_the_whole_queue_whatever_its_sessions():
    """Row 1: 80 fresh sessions from one address each held a tab's 16 places and filled the 64-place queue."""
    places = QueuePlaces(64)
    held: list[Place] = []
    for i in range(80):
        if places.refusal("6.6.6.6", f"s{i}", held) is None:
            held.append(Place("6.6.6.6", f"s{i}"))
    assert len(held) == places.per_visitor == 32
    assert places.refusal("203.0.113.9", "teacher", held) is None  # another address still gets in
    assert "from your address" in str(places.refusal("6.6.6.6", "s-new", held))


def test_a_tab_holds_its_fair_share_of_its_address_and_a_lone_tab_its_16():
    places = QueuePlaces(64)
    alone = [Place("a", "t1") for _ in range(16)]
    assert places.refusal("a", "t1", alone[:15]) is None
    assert places.refusal("a", "t1", alone) is not None  # a lone tab: 16
    crowd = [Place("a", f"t{i}") for i in range(20)]  # 20 tabs of one school each hold one
    assert places.tab_share({f"t{i}" for i in range(20)}) == 2
    assert places.refusal("a", "t0", crowd) is None and places.refusal("a", "t0", crowd + [Place("a", "t0")])


def test_a_class_of_30_behind_one_address_fits():
    places = QueuePlaces(64)
    held: list[Place] = []
    for i in range(30):
        assert places.refusal("school", f"student{i}", held) is None
        held.append(Place("school", f"student{i}"))


def test_scripts_of_an_address_scale_with_its_open_tabs_within_a_bound():
    """Round 5's rule stays for a lone script (2 places); a class's notebooks behind one address are not held to 2."""
    places = QueuePlaces(64)
    two = [Place("a", None), Place("a", None)]
    assert places.refusal("a", None, two, tabs_open=0) is not None
    assert places.refusal("a", None, two, tabs_open=1) is not None
    assert places.refusal("a", None, two, tabs_open=10) is None
    assert places.client_places(10) == 16 and places.client_places(1000) == 16  # bounded


def test_a_signed_in_visitor_is_their_account():
    assert key("10.0.0.1") == "10.0.0.1"
    assert key("10.0.0.1", "ada") == key("10.0.0.2", "ada") != key("10.0.0.1")


def test_each_lane_serves_its_visitors_in_turn():
    line = ["a1", "a2", "a3", "a4", "b1", "c1", "b2"]
    assert fair_order(line, lambda e: e[0]) == ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]


def test_a_visitor_beyond_its_tabs_closes_its_oldest_idle_never_a_live_one_nor_anothers():
    clock = [0.0]
    tabs = Tabs(per_visitor=3, clock=lambda: clock[0])
    tabs.open("teacher", "school")
    for i in range(3):
        clock[0] += 1
        assert tabs.open(f"x{i}", "attacker") == []
    tabs.connect("x0")  # its heartbeat is connected: live
    clock[0] += 1
    assert tabs.open("x3", "attacker") == ["x1"]  # x0 is older but live
    clock[0] += 1
    assert tabs.open("x4", "attacker") == ["x2"]
    assert tabs.count("attacker") == 3 and tabs.visitor("teacher") == "school" and tabs.live("x0")
    tabs.disconnect("x0")
    assert not tabs.live("x0")
    tabs.close("teacher")
    assert tabs.visitor("teacher") is None


def test_a_shared_batch_owner_belongs_to_its_tabs_address_or_its_clients():
    """The shared batch offers places by visitor, then tab (`Scheduler.visitor_of` is `Tabs.owner_visitor` on the
    page): a page tab's run belongs to the address the tab was opened from, a script's to its client's address."""
    tabs = Tabs(per_visitor=60)
    tabs.open("s1", "10.0.0.1")
    tabs.open("s2", "10.0.0.1")
    assert tabs.owner_visitor(visitors.page("s1")) == tabs.owner_visitor(visitors.page("s2")) == "10.0.0.1"
    assert tabs.owner_visitor(visitors.client("10.0.0.9")) == "10.0.0.9"
    assert tabs.owner_visitor(visitors.page("never-opened")) == visitors.page("never-opened")  # its own
