"""Issue 37: lesson 03's build-it checker runs the learner's ring on real ranks against dist.all_reduce."""
from distlab.course import exercises_ring as ex
from tests.test_build import from_cell

RING = '''
def my_ring(tensor, worker):
    rank, n = worker.rank, worker.world_size
    chunks = tensor.tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):
        send_c, recv_c = (rank - step) % n, (rank - step - 1) % n
        incoming = torch.empty_like(chunks[recv_c])
        worker.exchange(chunks[send_c], right, incoming, left)
        chunks[recv_c].add_(incoming)
    for step in range({gather}):
        send_c, recv_c = (rank + 1 - step) % n, (rank - step) % n
        worker.exchange(chunks[send_c], right, chunks[recv_c], left)
'''


def test_lesson_03_ring_right_and_wrong(capsys):
    assert ex.ring(...) is None
    assert ex.ring(from_cell(RING.format(gather="n - 1"), "my_ring")) is True
    assert ex.ring(from_cell(RING.format(gather="n - 2"), "my_ring")) is False    # one all-gather step short
    said = capsys.readouterr().out
    assert "not quite (demo numbers)" in said and "chunk" in said and "missing rank(s)" in said, said


def test_reading_a_demo_sum():
    assert ex.whose(3 * 111, 2, 3) == "every rank's number once"
    assert ex.whose(3 * 101, 2, 3) == "missing rank(s) [1]"
    assert ex.whose(3 * 112, 2, 3) == "rank(s) [0] added more than once"
