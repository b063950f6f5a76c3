"""The profiling session: producers register with it; it reaches for none of them."""

from profiled_programs import dma_only_run

from neuronsim.profiler import session
from neuronsim.profiler.events import DeviceOpEvent, PlacedRun


def test_a_clock_reader_keeps_more_records_while_recording_and_its_events_are_read():
    asked = []
    # device indices no real device uses: the emulated device may have registered its reader too
    ops = {1001: [DeviceOpEvent("aten::mul.Tensor", 0.0, 10.0, True)], 1000: [], 1003: []}
    session.register_clock_reader("test-device", lambda: ops, asked.append)
    try:
        assert asked == []  # not recording: the device keeps its default ring
        rec = session.start()
        try:
            assert asked == [session.DEVICE_CLOCK_CAPACITY]
        finally:
            assert session.stop() is rec
        events = session.device_events()
        assert events[1001] == ops[1001]
        assert 1000 not in events and 1003 not in events  # devices that ran nothing
    finally:
        session._clock_readers.pop("test-device")


def test_released_clocks_go_back_to_their_usual_ring():
    asked = []
    session.register_clock_reader("test-device", lambda: {}, asked.append)
    try:
        session.start()
        session.stop()
        assert asked == [session.DEVICE_CLOCK_CAPACITY]  # stopping keeps what was recorded readable
        session.release_clocks()
        assert asked == [session.DEVICE_CLOCK_CAPACITY, None]
    finally:
        session._clock_readers.pop("test-device")


def test_a_reader_registered_during_a_session_keeps_more_from_then_on():
    asked = []
    rec = session.start("op")
    try:
        session.register_clock_reader("late-device", lambda: {}, asked.append)
        assert asked == [session.DEVICE_CLOCK_CAPACITY]
    finally:
        session.stop()
        session._clock_readers.pop("late-device")
    assert rec.launches == []


def test_launches_are_recorded_only_while_a_session_records():
    run = dma_only_run()
    session.record_launch([PlacedRun(run)], "before")
    rec = session.start("instruction")
    try:
        session.record_launch([PlacedRun(run, 0, 0.0), PlacedRun(run, 1, 0.0)], "grid", wall_ns=5)
    finally:
        session.stop()
    session.record_launch([PlacedRun(run)], "after")
    assert [(launch.name, launch.wall_ns, len(launch.placed)) for launch in rec.launches] == [("grid", 5, 2)]
    assert rec.launches[0].total_ns == run.total_ns
