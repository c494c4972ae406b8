SELECT uuidv7();
