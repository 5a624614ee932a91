from trainest.entry import main

main()
