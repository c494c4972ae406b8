SELECT hivenet.next_unified_serial('C0001', 'A01', '01');
