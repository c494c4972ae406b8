def test_unified(db):
    s = db.execute("SELECT hivenet.next_unified_serial('C0001','A01','01')").fetchone()[0]
    print(s)
    assert len(s) == 28
